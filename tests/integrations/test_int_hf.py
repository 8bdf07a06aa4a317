"""EvalStopCallback on the real HF Trainer: a tiny GPT-2 built from a config, trained on CPU."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs pip install -e '.[hf]'")
transformers = pytest.importorskip("transformers", reason="needs pip install -e '.[hf]'")
safetensors_torch = pytest.importorskip("safetensors.torch")

from evalstop.detectors import Eval, KDeclines  # noqa: E402
from evalstop.integrations import EvalStopCallback  # noqa: E402

VOCAB, SEQ = 50, 8


def tiny_model(seed: int = 0) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def scheduled_metric(scores: list[float]):  # type: ignore[no-untyped-def]
    """compute_metrics returning the next score of ``scores`` at each evaluation."""
    calls = iter(scores)

    def compute_metrics(_eval_pred: object) -> dict[str, float]:
        return {"gold": next(calls)}

    return compute_metrics


def make_trainer(tmp_path: Path, scores: list[float], callback: EvalStopCallback, **overrides: object):
    kwargs: dict[str, object] = dict(
        output_dir=str(tmp_path / "out"), max_steps=40, eval_strategy="steps", eval_steps=2,
        save_strategy="steps", save_steps=2, per_device_train_batch_size=4, per_device_eval_batch_size=4,
        learning_rate=5e-2, report_to=[], logging_steps=2, use_cpu=True, disable_tqdm=True, seed=0,
    )
    kwargs.update(overrides)
    args = transformers.TrainingArguments(**kwargs)
    return transformers.Trainer(
        model=tiny_model(), args=args, train_dataset=Tokens(64, 1), eval_dataset=Tokens(4, 2),
        compute_metrics=scheduled_metric(scores), callbacks=[callback],
    )


#            steps: 2    4    6    8    10   12   14 ...
RISE_THEN_FALL = [0.2, 0.4, 0.6, 0.5, 0.45, 0.7, 0.8] + [0.9] * 20


def checkpoints(out: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_weights(model: torch.nn.Module, checkpoint: Path) -> bool:
    saved = safetensors_torch.load_file(str(checkpoint / "model.safetensors"))
    return all(torch.equal(v, saved[k]) for k, v in model.state_dict().items() if k in saved)


def test_stops_at_detector_step_and_restores_best(tmp_path: Path) -> None:
    callback = EvalStopCallback("eval_gold", KDeclines(k=2))
    trainer = make_trainer(
        tmp_path, RISE_THEN_FALL, callback, load_best_model_at_end=True, metric_for_best_model="gold",
        save_total_limit=1,
    )
    trainer.train()
    out = tmp_path / "out"
    expected = KDeclines(k=2).evaluate([Eval(2 * (i + 1), s) for i, s in enumerate(RISE_THEN_FALL)])
    assert (expected.stop_step, expected.best_step) == (10, 6)
    assert trainer.state.global_step == 10
    assert callback.verdict.stopped and callback.verdict.stop_step == 10 and callback.verdict.best_step == 6
    assert trainer.state.best_model_checkpoint == str(out / "checkpoint-6")
    assert 6 in checkpoints(out)
    assert same_weights(trainer.model, out / "checkpoint-6")
    record = json.loads((out / "evalstop.json").read_text())
    assert record["decision"] == "stop" and record["stop_step"] == 10 and record["best_step"] == 6
    assert record["best_checkpoint"] == str(out / "checkpoint-6")
    assert [row[0] for row in record["evals"]] == [2, 4, 6, 8, 10]
    saved = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["stateful_callbacks"]
    assert [row[0] for row in saved["EvalStopCallback"]["attributes"]["history_rows"]] == [2, 4, 6]


def test_without_save_strategy_the_callback_saves_best_and_stop(tmp_path: Path) -> None:
    """save_strategy="no": the callback itself saves at each new best and at the stop, and the
    save_total_limit rotation never deletes the best."""
    callback = EvalStopCallback("eval_gold", "evalstop:k=2")
    trainer = make_trainer(tmp_path, RISE_THEN_FALL, callback, save_strategy="no", save_total_limit=2)
    before = weights(trainer.model)
    trainer.train()
    out = tmp_path / "out"
    assert trainer.state.global_step == 10
    assert trainer.state.best_model_checkpoint == str(out / "checkpoint-6")
    assert checkpoints(out) == [6, 10]  # the best and the state at the stop; 2 and 4 rotated away
    assert same_weights(trainer.model, out / "checkpoint-10")  # no load_best_model_at_end: weights stay
    assert not same_weights(trainer.model, out / "checkpoint-6")
    assert any(not torch.equal(before[k], v) for k, v in weights(trainer.model).items())


def test_nan_scores_never_stop(tmp_path: Path) -> None:
    scores = [0.2, 0.4, math.nan, math.nan, math.nan, 0.5, 0.6, 0.7]
    callback = EvalStopCallback("eval_gold", KDeclines(k=1))
    trainer = make_trainer(tmp_path, scores, callback, max_steps=16, save_strategy="no")
    with pytest.warns(UserWarning, match=r"metric 'eval_gold' is nan at step 6; the rule skips it") as seen:
        trainer.train()  # issue 19: said, as the Optuna pruner says it, once per skipped eval
    assert len([w for w in seen if "the rule skips it" in str(w.message)]) == 3
    assert trainer.state.global_step == 16
    assert not callback.verdict.stopped and callback.verdict.n_invalid == 3
    assert callback.verdict.best_step == 16


def test_min_mode_on_eval_loss_and_train_time_metric(tmp_path: Path) -> None:
    """mode="min" on a real logged metric: the run is judged on what the Trainer itself logs."""
    callback = EvalStopCallback("eval_loss", "evalstop:k=1", mode="min")
    trainer = make_trainer(tmp_path, [0.0] * 20, callback, max_steps=20, save_strategy="no")
    trainer.train()
    losses = [(h["step"], h["eval_loss"]) for h in trainer.state.log_history if "eval_loss" in h]
    expected = KDeclines(k=1, mode="min").evaluate([Eval(s, v) for s, v in losses])
    assert callback.verdict == expected
    assert trainer.state.global_step == (expected.stop_step or 20)


def test_resumed_run_keeps_its_history(tmp_path: Path) -> None:
    """Declines before and after a resume add up: the history comes back from evalstop.json."""
    rule = "evalstop:k=2"
    first = make_trainer(tmp_path, RISE_THEN_FALL[:4], EvalStopCallback("eval_gold", rule), max_steps=8)
    first.train()
    assert first.state.global_step == 8  # one decline (at 8) so far: no stop
    callback = EvalStopCallback("eval_gold", rule)
    second = make_trainer(tmp_path, RISE_THEN_FALL[4:], callback, max_steps=40)
    second.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-8"))
    assert second.state.global_step == 10
    assert (callback.verdict.stop_step, callback.verdict.best_step) == (10, 6)
    assert [ev.step for ev in callback.history.evals] == [2, 4, 6, 8, 10]


def test_conflicting_best_metric_is_refused(tmp_path: Path) -> None:
    callback = EvalStopCallback("eval_gold")
    trainer = make_trainer(tmp_path, RISE_THEN_FALL, callback, load_best_model_at_end=True)
    with pytest.raises(ValueError, match="metric_for_best_model is 'loss'"):
        trainer.train()
    callback = EvalStopCallback("eval_gold")
    trainer = make_trainer(
        tmp_path, RISE_THEN_FALL, callback, load_best_model_at_end=True, metric_for_best_model="gold",
        greater_is_better=False,
    )
    with pytest.raises(ValueError, match="greater_is_better is False"):
        trainer.train()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="Unknown detector 'nope'"):
        EvalStopCallback("eval_gold", "nope")
    with pytest.raises(ValueError, match="'mode' parameter of EvalStopCallback"):
        EvalStopCallback("eval_gold", mode="up")
    with pytest.raises(TypeError, match="'detector' parameter of EvalStopCallback"):
        EvalStopCallback("eval_gold", 3)  # type: ignore[arg-type]


def test_state_round_trips_through_checkpoint_state() -> None:
    callback = EvalStopCallback("eval_gold", KDeclines(k=3, against="best"))
    for step, score in [(2, 0.1), (4, 0.3), (6, math.nan), (8, 0.2)]:
        callback.history.add(Eval(step, score))
    state = json.loads(json.dumps(callback.state()))
    restored = EvalStopCallback.from_state(state)
    assert restored.detector == callback.detector
    assert restored.history.evals[1:2] == callback.history.evals[1:2]
    assert restored.verdict == callback.verdict


@pytest.mark.slow
def test_hf_example_stops_on_the_drifting_run(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "hf_trainer_evalstop.py"
    proc = subprocess.run(
        [sys.executable, str(example), "--quick", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    record = json.loads((tmp_path / "evalstop.json").read_text())
    assert summary["decision"] == record["decision"] == "stop", proc.stdout
    assert record["best_step"] < record["stop_step"] < 100  # stopped before max_steps (--quick: 100)
    expected = KDeclines(k=2).evaluate([Eval(int(r[0]), r[1]) for r in record["evals"]])
    assert (expected.stop_step, expected.best_step) == (record["stop_step"], record["best_step"])
    assert summary["best_checkpoint"] == str(tmp_path / f"checkpoint-{record['best_step']}")
    assert (tmp_path / f"checkpoint-{record['best_step']}").is_dir()


# ---- issue: resume, HF names and modes, early misconfiguration, shared record, several evals -------


def test_resuming_past_the_stop_is_refused_and_before_it_keeps_watching(tmp_path: Path) -> None:
    rule = "evalstop:k=2"
    reused = EvalStopCallback("eval_gold", rule)
    first = make_trainer(tmp_path, RISE_THEN_FALL, reused)
    first.train()
    assert first.state.global_step == 10  # stopped: declines at 8 and 10
    out = tmp_path / "out"
    again = make_trainer(tmp_path, [0.3, 0.2, 0.1] * 10, EvalStopCallback("eval_gold", rule))
    with pytest.raises(ValueError, match=r"stopped this run at step 10 .*checkpoint-6.*after_stop='restart'"):
        again.train(resume_from_checkpoint=str(out / "checkpoint-10"))
    # the same callback object, reused: its history past the checkpoint does not count either
    third = make_trainer(tmp_path, [0.3, 0.2, 0.1] * 10, reused)
    with pytest.raises(ValueError, match="stopped this run at step 10"):
        third.train(resume_from_checkpoint=str(out / "checkpoint-10"))
    # before the stop: the history up to the checkpoint comes back and the rule keeps watching
    callback = EvalStopCallback("eval_gold", rule)
    fourth = make_trainer(tmp_path, [0.5, 0.45, 0.3], callback)
    fourth.train(resume_from_checkpoint=str(out / "checkpoint-6"))
    assert [ev.step for ev in callback.history.evals] == [2, 4, 6, 8, 10]
    assert fourth.state.global_step == 10 and callback.verdict.stop_step == 10


def test_after_stop_restart_watches_the_resumed_run_afresh(tmp_path: Path) -> None:
    first = make_trainer(tmp_path, RISE_THEN_FALL, EvalStopCallback("eval_gold", "evalstop:k=2"))
    first.train()
    callback = EvalStopCallback("eval_gold", "evalstop:k=2", after_stop="restart")
    second = make_trainer(tmp_path, [0.33, 0.2, 0.01] + [0.5] * 20, callback)
    with pytest.warns(UserWarning, match="watches the resumed run afresh"):
        second.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-10"))
    assert second.state.global_step == 16  # 12: best, 14 and 16: declines -> stop, never silent
    assert callback.verdict.stopped and callback.verdict.stop_step == 16


@pytest.mark.parametrize("best_metric", ["gold", None])
def test_metric_names_follow_hf_eval_prefix(tmp_path: Path, best_metric: str | None) -> None:
    callback = EvalStopCallback("gold", "evalstop:k=2")
    extra: dict[str, object] = {"metric_for_best_model": best_metric} if best_metric else {}
    trainer = make_trainer(tmp_path, RISE_THEN_FALL, callback, load_best_model_at_end=bool(best_metric),
                           **extra)
    trainer.train()
    assert trainer.state.global_step == 10 and callback.verdict.best_step == 6


def test_a_loss_metric_is_lower_is_better_like_hf(tmp_path: Path) -> None:
    assert EvalStopCallback("eval_loss").mode == "min" and EvalStopCallback("loss", "evalstop").mode == "min"
    assert EvalStopCallback("eval_loss", mode="max").mode == "max"
    assert EvalStopCallback("eval_loss", "evalstop:mode=max").mode == "max"
    assert EvalStopCallback("eval_gold").mode == "max"
    callback = EvalStopCallback("eval_loss", "evalstop:k=1")
    trainer = make_trainer(tmp_path, [0.0] * 20, callback, max_steps=20, save_strategy="no")
    trainer.train()
    losses = [(h["step"], h["eval_loss"]) for h in trainer.state.log_history if "eval_loss" in h]
    assert callback.verdict == KDeclines(k=1, mode="min").evaluate([Eval(s, v) for s, v in losses])
    best = min(losses, key=lambda sv: sv[1])
    assert callback.verdict.best_step == best[0]  # the lowest loss, not the highest


def test_no_evaluations_fails_at_train_begin(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, RISE_THEN_FALL, EvalStopCallback("eval_gold"), eval_strategy="no")
    with pytest.raises(ValueError, match="eval_strategy is 'no'"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_a_metric_never_logged_fails_at_the_first_round(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, RISE_THEN_FALL, EvalStopCallback("eval_glod"))
    wrong = r"'eval_glod'.*not among the evaluation metrics at step 2: .*gold"
    with pytest.raises(ValueError, match=wrong) as exc:
        trainer.train()
    assert "(or 'eval_glod')" not in str(exc.value)  # issue 19: the name once, not "'x' (or 'x')"
    assert trainer.state.global_step == 3
    trainer = make_trainer(tmp_path, RISE_THEN_FALL, EvalStopCallback("gold"), eval_strategy="no")
    with pytest.raises(ValueError, match=r"'gold' is not in the training logs .*eval_strategy is 'no'"):
        trainer.train()
    assert trainer.state.global_step == 2


def test_two_callbacks_share_one_merged_record(tmp_path: Path) -> None:
    gold = EvalStopCallback("eval_gold", "evalstop:k=2")
    loss = EvalStopCallback("eval_loss", "never")
    (tmp_path / "out").mkdir()
    stale = {"metric": "eval_old", "decision": "stop", "stop_step": 2, "evals": []}
    (tmp_path / "out" / "evalstop.json").write_text(json.dumps(stale))  # from an earlier run
    trainer = make_trainer(tmp_path, RISE_THEN_FALL, gold)
    trainer.add_callback(loss)
    trainer.train()
    record = json.loads((tmp_path / "out" / "evalstop.json").read_text())
    assert set(record["metrics"]) == {"eval_gold", "eval_loss"}
    assert record["metrics"]["eval_gold"]["decision"] == "stop"
    assert record["metrics"]["eval_loss"]["decision"] == "continue"
    assert record["metrics"]["eval_loss"]["mode"] == "min"
    assert record["decision"] == "stop" and record["metric"] == "eval_gold" and record["stop_step"] == 10


def test_several_eval_datasets_no_spurious_warning(tmp_path: Path) -> None:
    import warnings

    scores = iter([s for s in RISE_THEN_FALL for _ in range(2)])  # one call per dataset per round

    def compute_metrics(_eval_pred: object) -> dict[str, float]:
        return {"gold": next(scores)}

    callback = EvalStopCallback("eval_a_gold", "evalstop:k=2")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=40, eval_strategy="steps", eval_steps=2,
        save_strategy="no", per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=5e-2,
        report_to=[],
        logging_steps=2, use_cpu=True, disable_tqdm=True, seed=0,
    )
    trainer = transformers.Trainer(
        model=tiny_model(), args=args, train_dataset=Tokens(64, 1),
        eval_dataset={"a": Tokens(4, 2), "b": Tokens(4, 3)}, compute_metrics=compute_metrics,
        callbacks=[callback],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if "EvalStopCallback" in str(w.message)]
    assert trainer.state.global_step == 10 and [ev.step for ev in callback.history.evals] == [2, 4, 6, 8, 10]
