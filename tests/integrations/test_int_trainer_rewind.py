"""Issue 23 (b): EvalStopCallback rewinds a real tiny HF Trainer in place to its best checkpoint."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs pip install -e '.[hf]'")
transformers = pytest.importorskip("transformers", reason="needs pip install -e '.[hf]'")
safetensors_torch = pytest.importorskip("safetensors.torch")

from test_int_hf import make_trainer  # noqa: E402

from evalstop.detectors import KDeclines, OnDetect  # noqa: E402
from evalstop.integrations import EvalStopCallback  # noqa: E402

#            steps: 2    4    6    8    10 | rewound to 6; then 12   14   16    18   20 ...
SCORES = [0.2, 0.4, 0.6, 0.5, 0.45] + [0.55, 0.65, 0.6, 0.58] + [0.5] * 20
LR = 5e-2


class Probe(transformers.TrainerCallback):  # type: ignore[misc]
    """Copies the model and optimizer after every evaluation (it runs after EvalStopCallback)."""

    def __init__(self) -> None:
        self.seen: dict[int, dict[str, Any]] = {}

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        optimizer = kwargs["optimizer"]
        self.seen[state.global_step] = {
            "weights": {k: v.detach().clone() for k, v in kwargs["model"].state_dict().items()},
            "lr": optimizer.param_groups[0]["lr"],
            "optimizer": copy.deepcopy(optimizer.state_dict()),
        }

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.seen.setdefault(-1, {"lrs": []})["lrs"].append(kwargs["optimizer"].param_groups[0]["lr"])


def run(tmp_path: Path, policy: OnDetect) -> tuple[EvalStopCallback, Probe, Any]:
    callback = EvalStopCallback(metric="gold", detector=KDeclines(k=2), on_detect=policy)
    trainer = make_trainer(tmp_path, SCORES, callback, learning_rate=LR,
                           lr_scheduler_type="constant", max_steps=24)
    trainer.remove_callback(callback)
    callback.bind(trainer)
    probe = Probe()
    trainer.add_callback(probe)
    trainer.train()
    return callback, probe, trainer


def test_a_real_trainer_rewinds_to_its_best_checkpoint_with_a_lower_lr(tmp_path: Path) -> None:
    policy = OnDetect(on_detect="rewind", max_rewinds=1, correction="lr*=0.5")
    with pytest.warns(UserWarning, match="rewound the run at step 10 .*checkpoint-6, correction lr\\*=0.5"):
        callback, probe, trainer = run(tmp_path, policy)
    out = tmp_path / "out"
    best = safetensors_torch.load_file(str(out / "checkpoint-6" / "model.safetensors"))
    after = probe.seen[10]["weights"]  # right after the rewind, in the same evaluation
    assert all(torch.equal(after[k], v) for k, v in best.items())
    assert not all(torch.equal(probe.seen[8]["weights"][k], v) for k, v in best.items())
    saved_opt = torch.load(out / "checkpoint-6" / "optimizer.pt", weights_only=True)
    live_opt = probe.seen[10]["optimizer"]
    assert live_opt["state"][0]["step"] == saved_opt["state"][0]["step"]
    assert torch.equal(live_opt["state"][0]["exp_avg"], saved_opt["state"][0]["exp_avg"])
    assert probe.seen[8]["lr"] == LR and probe.seen[10]["lr"] == LR * 0.5
    assert set(probe.seen[-1]["lrs"][10:]) == {LR * 0.5}  # and it stays lowered (constant schedule)
    # after the rewind the rule restarts from step 6: 0.55 (12), 0.65 (14, new best), 0.6, 0.58 -> stop at 18
    assert trainer.state.global_step == 18 and callback.verdict.stop_step == 18
    record = json.loads((out / "evalstop.json").read_text())
    events = [(e["event"], e["step"]) for e in record["log"]]
    assert events == [("detect", 10), ("rewind", 10), ("detect", 18), ("stop", 18)]
    assert record["rewinds"][0]["lr"] == [LR, LR * 0.5] and record["rewinds"][0]["to_step"] == 6
    assert record["rewinds"][0]["optimizer"] and record["rewinds"][0]["scheduler"]
    assert record["best_step"] == 14 and record["best_checkpoint"] == str(out / "checkpoint-14")


def test_a_trainer_without_a_kl_coefficient_is_refused_at_train_begin(tmp_path: Path) -> None:
    policy = OnDetect(on_detect="rewind", correction="kl_coef*=2")
    with pytest.raises(ValueError, match="Trainer has no KL coefficient \\(no 'beta'"):
        run(tmp_path, policy)
    callback = EvalStopCallback(metric="gold", on_detect=policy)
    trainer = make_trainer(tmp_path, SCORES, callback)
    with pytest.raises(ValueError, match=r"needs the trainer\. Add the callback with callback\.bind"):
        trainer.train()


def test_ref_best_on_a_trainer_without_a_reference_model_is_refused_at_train_begin(tmp_path: Path) -> None:
    policy = OnDetect(on_detect="rewind", correction="ref=best,lr*=0.5")
    with pytest.raises(ValueError, match=r"ref=best: Trainer has no reference model \(no 'ref_model'\)"):
        run(tmp_path, policy)
    callback = EvalStopCallback(metric="gold", on_detect=policy)
    trainer = make_trainer(tmp_path, SCORES, callback)
    with pytest.raises(ValueError, match=r"ref=best: it needs the trainer\. Add the callback with callback"):
        trainer.train()


def test_no_saved_checkpoint_stops_instead_of_rewinding(tmp_path: Path) -> None:
    policy = OnDetect(on_detect="rewind", correction="lr*=0.5")
    callback = EvalStopCallback(metric="gold", detector=KDeclines(k=2), on_detect=policy)
    trainer = make_trainer(tmp_path, SCORES, callback, learning_rate=LR, max_steps=24)
    deleted = []

    class DeleteBest(transformers.TrainerCallback):  # type: ignore[misc]
        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            for path in (tmp_path / "out" / "checkpoint-6").glob("model.safetensors"):
                path.unlink()
                deleted.append(path)

    trainer.add_callback(DeleteBest())
    with pytest.warns(UserWarning, match="no checkpoint was saved at the best eval \\(step 6"):
        trainer.train()
    assert deleted and callback.verdict.stop_step == 10 and trainer.state.global_step == 10
    assert [e["event"] for e in callback.history.monitor.log] == ["detect", "stop"]


def test_ref_best_is_refused_where_a_new_reference_would_not_be_used() -> None:
    from types import SimpleNamespace

    from evalstop.detectors import Correction
    from evalstop.integrations._trainer_rewind import check_correction

    reset = Correction.parse("ref=best")
    model = torch.nn.Linear(2, 2)
    precomputed = SimpleNamespace(precompute_ref_log_probs=True)
    dpo = SimpleNamespace(beta=0.1, ref_model=model, model=model, args=precomputed)
    with pytest.raises(ValueError, match="precomputed the reference model's log-probabilities"):
        check_correction(reset, dpo)
    peft = SimpleNamespace(beta=0.1, ref_model=None, model=SimpleNamespace(peft_config={}), args=None)
    with pytest.raises(ValueError, match="trains a PEFT model, whose reference is the base model"):
        check_correction(reset, peft)
    check_correction(reset, SimpleNamespace(beta=0.1, ref_model=model, model=model, args=SimpleNamespace()))
