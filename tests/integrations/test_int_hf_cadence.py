"""EvalStopCallback following an eval cadence on the real HF Trainer (tiny GPT-2 on CPU)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs pip install -e '.[hf]'")
transformers = pytest.importorskip("transformers", reason="needs pip install -e '.[hf]'")

from evalstop.detectors import DEFAULT_SPEC, Adaptive, Eval, Monitor, parse_spec, watch  # noqa: E402
from evalstop.integrations import EvalStopCallback  # noqa: E402
from evalstop.replay import replay_rows  # noqa: E402
from evalstop.workloads.bank import build_bank  # noqa: E402

VOCAB, SEQ = 50, 8


class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def train(  # type: ignore[no-untyped-def]
    tmp_path: Path, curve: list[float], callback: EvalStopCallback, eval_steps: int,
    stderr: float | None = None,
):
    """Train for len(curve) steps; the watched metric at step s is curve[s - 1] (with
    ``gold_stderr`` when ``stderr`` is given)."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=len(curve), eval_strategy="steps", eval_steps=eval_steps,
        save_strategy="no", per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=5e-2,
        report_to=[], logging_steps=1000, use_cpu=True, disable_tqdm=True, seed=0,
    )
    trainer = transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args,
                                   train_dataset=Tokens(64, 1), eval_dataset=Tokens(4, 2),
                                   callbacks=[callback])
    extra = {} if stderr is None else {"gold_stderr": stderr}
    trainer.compute_metrics = lambda _pred: {"gold": curve[trainer.state.global_step - 1], **extra}
    trainer.train()
    return trainer


#         steps 1..12 rise, peak at 12 (an every-3 step), ties at 13-14, falls from 15
HACKED = [0.05 * s for s in range(1, 13)] + [0.6, 0.6] + [0.6 - 0.05 * k for k in range(1, 17)]


def test_adaptive_cadence_same_stop_and_best_checkpoint_with_fewer_evals(tmp_path: Path) -> None:
    rule = "evalstop:k=2,against=best,min_delta=0.01"
    dense = EvalStopCallback("gold", rule)
    train(tmp_path / "dense", HACKED, dense, eval_steps=1)
    sparse = EvalStopCallback("gold", rule, cadence="adaptive:every=3")
    trainer = train(tmp_path / "adaptive", HACKED, sparse, eval_steps=3)
    assert dense.verdict.stopped and sparse.verdict.stopped
    assert (dense.verdict.stop_step, dense.verdict.best_step) == (16, 12)
    assert (sparse.verdict.stop_step, sparse.verdict.best_step) == (16, 12)
    assert [ev.step for ev in sparse.history.evals] == [3, 6, 9, 12, 15, 16]
    assert len(dense.history.evals) == 16
    assert trainer.state.global_step == 16  # the run stopped where the rule fired
    assert trainer.state.best_model_checkpoint == str(tmp_path / "adaptive" / "checkpoint-12")
    assert (tmp_path / "adaptive" / "checkpoint-12").is_dir()
    hint = sparse.next_eval
    assert hint is not None and hint.done


def test_replay_and_the_callback_ask_for_the_same_evals_on_a_bank_run(tmp_path: Path) -> None:
    run = next(r for r in build_bank(0, 2, families=["base"]) if r.truth.label == "hacking")
    curve = [ev.score for ev in run.evals]
    n = len(curve)
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["job_id", "step", "score", "progress"])
    for i, score in enumerate(curve):
        writer.writerow([run.job_id, i + 1, repr(score), repr((i + 1) / n)])
    [replayed] = replay_rows(csv.DictReader(io.StringIO(text.getvalue())), parse_spec(DEFAULT_SPEC),
                             cadence=Adaptive())
    monitor = Monitor(DEFAULT_SPEC, Adaptive())
    used = watch(monitor, [Eval(i + 1, s, (i + 1) / n) for i, s in enumerate(curve)])
    callback = EvalStopCallback("gold", cadence="adaptive")
    train(tmp_path, curve, callback, eval_steps=3)
    assert [ev.step for ev in callback.history.evals] == [i + 1 for i in used]
    assert replayed["evals_used"] == len(used) < n / 2 + 1
    v = callback.verdict
    assert (v.stopped, v.stop_step, v.best_step) == tuple(
        replayed[k] for k in ("stopped", "stop_step", "best_step")
    )


def test_bad_cadence_settings_fail_at_train_begin(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="eval_steps=4 must be a multiple of the cadence's quiet gap 3"):
        train(tmp_path, HACKED, EvalStopCallback("gold", cadence="adaptive:every=3"), eval_steps=4)
    with pytest.raises(ValueError, match="Unknown cadence 'often'"):
        EvalStopCallback("gold", cadence="often")


def test_a_logged_stderr_reaches_the_rule(tmp_path: Path) -> None:
    """compute_metrics returns the mean and its standard error; cusum measures drops in it."""
    curve = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.58, 0.56, 0.54]
    callback = EvalStopCallback("gold", "cusum:n_warmup_evals=1")
    train(tmp_path, curve, callback, eval_steps=1, stderr=0.001)
    assert [ev.stderr for ev in callback.history.evals] == [0.001] * 7
    assert callback.verdict.stop_step == 7  # a drop of 0.02 is 20 standard errors: fires at once
