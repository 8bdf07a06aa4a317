"""The HF callback's standard error of a mean eval metric, on a real tiny Trainer (issue 20, item 5)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs pip install -e '.[hf]'")
transformers = pytest.importorskip("transformers", reason="needs pip install -e '.[hf]'")

from evalstop.integrations import EvalStopCallback  # noqa: E402
from evalstop.integrations._hf_stderr import cluster_stderr  # noqa: E402
from evalstop.integrations.hf import mean_and_stderr  # noqa: E402

VOCAB, SEQ = 50, 8
EVAL_N, EVAL_BATCH = 16, 4


def tiny_model() -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int, seed: int) -> None:
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def trainer_for(tmp_path: Path, callback: EvalStopCallback, bind: bool | None, **extra: object):  # type: ignore[no-untyped-def]
    """``bind``: True binds with ``loss_stderr=True``, None binds without it, False only adds."""
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=6, eval_strategy="steps", eval_steps=3,
        save_strategy="no", per_device_train_batch_size=4, per_device_eval_batch_size=EVAL_BATCH,
        learning_rate=5e-2, report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
    )
    trainer = transformers.Trainer(
        model=tiny_model(), args=args, train_dataset=Tokens(64, 1), eval_dataset=Tokens(EVAL_N, 2), **extra
    )
    if bind is False:
        trainer.add_callback(callback)
    else:
        callback.bind(trainer, loss_stderr=bool(bind))
    return trainer


def batch_losses(trainer: transformers.Trainer) -> list[float]:
    """Each eval batch's mean loss, from one evaluation per batch (a one-batch eval set)."""
    data = Tokens(EVAL_N, 2)
    return [
        trainer.evaluate(eval_dataset=torch.utils.data.Subset(data, range(i, i + EVAL_BATCH)))["eval_loss"]
        for i in range(0, EVAL_N, EVAL_BATCH)
    ]


def test_eval_loss_carries_the_stderr_of_its_batches(tmp_path: Path) -> None:
    callback = EvalStopCallback("eval_loss", "cusum")
    trainer = trainer_for(tmp_path, callback, bind=True)
    trainer.train()
    evals = list(callback.history.evals)
    assert [ev.step for ev in evals] == [3, 6]
    losses = batch_losses(trainer)  # the model as it was at the last eval (step 6)
    k = len(losses)
    mean = sum(losses) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in losses) / (k - 1))
    assert evals[-1].score == pytest.approx(mean, rel=1e-5)
    assert evals[-1].stderr == pytest.approx(sd / math.sqrt(k), rel=1e-4)
    assert all(ev.stderr is not None and ev.stderr > 0 for ev in evals)
    assert evals[0].stderr != evals[-1].stderr  # one estimate per evaluation, not carried over


def test_without_loss_stderr_or_for_another_metric_there_is_no_estimate(tmp_path: Path) -> None:
    plain = EvalStopCallback("eval_loss", "cusum")
    trainer_for(tmp_path / "a", plain, bind=False).train()
    assert [ev.stderr for ev in plain.history.evals] == [None, None]
    bound = EvalStopCallback("eval_loss", "cusum")
    trainer_for(tmp_path / "c", bound, bind=None).train()  # bound, without loss_stderr: no change
    assert bound._spread is None and [ev.stderr for ev in bound.history.evals] == [None, None]

    def accuracy(pred: object) -> dict[str, float]:
        return {"acc": 0.5}

    other = EvalStopCallback("eval_acc", "cusum")
    trainer_for(tmp_path / "b", other, bind=True, compute_metrics=accuracy).train()
    assert other._spread is None
    assert [ev.stderr for ev in other.history.evals] == [None, None]


def test_compute_metrics_mean_and_stderr_reaches_the_rule(tmp_path: Path) -> None:
    def token_accuracy(pred: transformers.EvalPrediction) -> dict[str, float]:
        logits, labels = pred.predictions, pred.label_ids
        hits = (logits[:, :-1].argmax(-1) == labels[:, 1:]).mean(axis=1)  # one value per example
        return mean_and_stderr("acc", hits)

    callback = EvalStopCallback("acc", "cusum")
    trainer = trainer_for(tmp_path, callback, bind=False, compute_metrics=token_accuracy)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "eval_acc" in entry]
    assert [ev.stderr for ev in callback.history.evals] == [entry["eval_acc_stderr"] for entry in logs]
    assert all(entry["eval_acc_stderr"] > 0 for entry in logs)


def test_cluster_stderr_weighs_batches_by_size() -> None:
    # unequal batches: one example per value, as clusters of sizes 2 and 1 (means 1.0 and 4.0)
    value = cluster_stderr([(1.0, 2), (4.0, 1)])
    mean = (2 * 1.0 + 4.0) / 3
    expect = math.sqrt(2 / 1 * ((2 * (1.0 - mean)) ** 2 + (4.0 - mean) ** 2)) / 3
    assert value == pytest.approx(expect)
    assert cluster_stderr([(1.0, 4)]) is None
    assert cluster_stderr([(1.0, 4), (1.0, 4)]) is None  # no spread: no estimate (not a zero sd)
    stats = mean_and_stderr("m", [1.0, 2.0, float("nan"), 3.0])
    assert stats == pytest.approx({"m": 2.0, "m_stderr": 1 / math.sqrt(3)})
    with pytest.raises(ValueError, match="'m'"):
        mean_and_stderr("m", [float("nan")])
