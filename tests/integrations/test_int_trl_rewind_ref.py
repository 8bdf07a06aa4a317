"""A real TRL GRPO trainer on CPU rewinds with ``ref=best``: the KL anchor becomes the checkpoint it
rewinds to (its reference model's weights equal the best checkpoint's after the rewind)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("trl", reason="needs pip install -e '.[hf]'")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from evalstop.detectors import OnDetect  # noqa: E402
from evalstop.integrations import EvalStopCallback  # noqa: E402
from evalstop.workloads.trl_runs import TrlConfig, run_grpo  # noqa: E402

CONFIG = TrlConfig().with_(lr=2e-3, beta=1e-3, n_steps=12, n_evals=6, gold_samples=16, eval_prompts=8)


def _weights(module: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in getattr(module, "module", module).state_dict().items()}


class Probe(transformers.TrainerCallback):  # type: ignore[misc]
    """Hands each watched eval to the EvalStopCallback (as the rewind study does), then keeps the
    reference model's weights and beta after every step, and the checkpoint a rewind went back to."""

    recorder: Any = None

    def __init__(self, watch: EvalStopCallback) -> None:
        self.watch, self.trainer = watch, None
        self.seen: dict[int, dict[str, Any]] = {}
        self.checkpoint: dict[str, Any] = {}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        record = self.recorder.record
        if record["steps"] and record["steps"][-1] == state.global_step:
            metrics = {"eval_watched": record["scores"][-1]}
            self.watch.on_evaluate(args, state, control, metrics=metrics, **kwargs)
        trainer: Any = self.trainer
        self.seen[state.global_step] = {"ref": _weights(trainer.ref_model), "beta": trainer.beta,
                                        "model": _weights(kwargs["model"])}
        if self.watch.rewinds and not self.checkpoint:
            folder = Path(self.watch.rewinds[0]["checkpoint"])
            self.checkpoint = safetensors_torch.load_file(str(folder / "model.safetensors"))


def _run(correction: str, beta: float = CONFIG.beta) -> tuple[EvalStopCallback, Probe]:
    policy = OnDetect("rewind", max_rewinds=1, correction=correction)
    watch = EvalStopCallback("watched", "fixed-progress:at=0.5", on_detect=policy)
    probe = Probe(watch)

    def bind(trainer: Any) -> None:
        probe.trainer = trainer
        watch.bind(trainer)

    with pytest.warns(UserWarning, match="rewound the run at step 6"):
        run_grpo(CONFIG.with_(beta=beta), np.random.SeedSequence(3), callbacks=[probe], on_trainer=bind)
    return watch, probe


@pytest.mark.slow
@pytest.mark.parametrize(("correction", "beta_after"), [("ref=best", 1e-3), ("ref=best,kl_coef*=4", 4e-3)])
def test_a_real_grpo_trainer_rewinds_with_its_reference_reset_to_the_best_checkpoint(
    correction: str, beta_after: float
) -> None:
    watch, probe = _run(correction)
    rewind = watch.rewinds[0]
    assert (rewind["step"], rewind["correction"]) == (6, correction)
    assert rewind["ref"] == rewind["checkpoint"]
    best, init = probe.checkpoint, probe.seen[2]["ref"]
    assert best and all(k in init for k in best)
    assert not all(torch.equal(init[k], v) for k, v in best.items())  # the best is not the initial policy
    assert all(torch.equal(probe.seen[4]["ref"][k], init[k]) for k in init)  # before: the initial policy
    after = probe.seen[6]
    assert all(torch.equal(after["ref"][k], v) for k, v in best.items())  # after: the best checkpoint
    assert all(torch.equal(after["model"][k], v) for k, v in best.items())
    assert probe.seen[4]["beta"] == pytest.approx(1e-3) and after["beta"] == pytest.approx(beta_after)
    later = probe.seen[max(probe.seen)]
    assert all(torch.equal(later["ref"][k], v) for k, v in best.items())  # the reference stays put
    assert not all(torch.equal(later["model"][k], v) for k, v in best.items())  # while the policy trains


@pytest.mark.slow
def test_ref_best_without_a_reference_model_is_refused_at_train_begin() -> None:
    policy = OnDetect("rewind", max_rewinds=1, correction="ref=best")
    watch = EvalStopCallback("watched", "fixed-progress:at=0.5", on_detect=policy)
    with pytest.raises(ValueError, match=r"GRPOTrainer was built with beta=0\.0, so it has no reference"):
        run_grpo(CONFIG.with_(beta=0.0), np.random.SeedSequence(3), callbacks=[Probe(watch)],
                 on_trainer=lambda trainer: watch.bind(trainer))
