"""The HF trainer_state.json poller: log_history evals, rewrites, rotation, half-written files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pull_sinks import RecordingSink

from evalstop.service.pull import Cursor, make_poller


def entry(step: int, **metrics: float) -> dict[str, Any]:
    return {"epoch": step / 100, "step": step, **metrics}


def save(path: Path, history: list[dict[str, Any]], **extra: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = [e.get("step", 0) for e in history if isinstance(e, dict)]
    state = {"global_step": max(steps, default=0), "log_history": history, **extra}
    path.write_text(json.dumps(state, indent=2))


def checkpoint(out: Path, step: int, history: list[dict[str, Any]]) -> None:
    save(out / f"checkpoint-{step}" / "trainer_state.json", history)


def test_output_dir_evals_with_checkpoints_and_rotation(tmp_path: Path) -> None:
    out = tmp_path / "run"
    history = [entry(50, loss=1.9), entry(100, eval_loss=1.2, eval_accuracy=0.61)]
    checkpoint(out, 100, history)
    sink = RecordingSink()
    poller = make_poller("trainer_state", sink, paths={"job-1": out}, metric="accuracy")
    assert poller.poll().delivered == 1
    rec = sink.calls[0][1][0]
    assert (rec.step, rec.value, rec.metric) == (100, 0.61, "accuracy")
    assert rec.checkpoint_uri == str(out / "checkpoint-100")
    history += [entry(200, eval_loss=1.1, eval_accuracy=0.66)]
    checkpoint(out, 200, history)
    shutil.rmtree(out / "checkpoint-100")  # save_total_limit=1 rotates the old one away
    assert poller.poll().delivered == 1 and sink.steps("job-1") == [100, 200]
    assert poller.poll().delivered == 0


def test_rewritten_file_after_resume_sends_only_new_steps(tmp_path: Path, caplog: Any) -> None:
    state = tmp_path / "trainer_state.json"
    save(state, [entry(100, eval_loss=0.9), entry(200, eval_loss=0.8), entry(300, eval_loss=0.85)])
    sink = RecordingSink()
    poller = make_poller("trainer_state", sink, paths={"j": state}, metric="eval_loss")
    assert poller.poll().delivered == 3
    # resumed from checkpoint-200: history truncated, step 300 re-evaluated with another value
    save(state, [entry(100, eval_loss=0.9), entry(200, eval_loss=0.8), entry(300, eval_loss=0.84),
                 entry(400, eval_loss=0.83)])
    assert poller.poll().delivered == 1 and sink.steps("j") == [100, 200, 300, 400]
    assert "value changed" in caplog.text


def test_half_written_file_is_skipped_until_complete(tmp_path: Path) -> None:
    state = tmp_path / "trainer_state.json"
    save(state, [entry(10, eval_reward=0.2)])
    text = state.read_text()
    state.write_text(text[: len(text) // 2])  # the Trainer is mid-write
    sink = RecordingSink()
    poller = make_poller("trainer_state", sink, paths={"j": state}, metric="eval_reward",
                         cursor=Cursor(tmp_path / "cursor.json"))
    assert poller.poll().delivered == 0
    state.write_text(text)
    assert poller.poll().delivered == 1


def test_missing_path_and_junk_entries(tmp_path: Path) -> None:
    state = tmp_path / "trainer_state.json"
    sink = RecordingSink()
    paths = {"j": state, "k": tmp_path / "nothing"}
    poller = make_poller("trainer_state", sink, paths=paths, metric="eval_loss")
    assert poller.poll().delivered == 0
    junk: list[Any] = [{"eval_loss": 0.5}, entry(5, eval_loss="oops"), "junk"]
    save(state, [*junk, entry(6, eval_loss=float("inf")), entry(7, eval_loss=0.4)])
    stats = poller.poll()
    assert (stats.delivered, stats.invalid, sink.steps("j")) == (1, 1, [7])


def test_config_with_cursor_path_and_bad_config(tmp_path: Path) -> None:
    state = tmp_path / "trainer_state.json"
    save(state, [entry(10, eval_loss=0.5)])
    config = {"paths": {"j": str(state)}, "metric": "eval_loss", "cursor_path": str(tmp_path / "c.json")}
    assert make_poller("trainer_state", RecordingSink(), **config).poll().delivered == 1
    assert make_poller("trainer_state", RecordingSink(), **config).poll().delivered == 0
    with pytest.raises(ValueError, match=r"The trainer_state poller's config is invalid: .*metric"):
        make_poller("trainer_state", RecordingSink(), paths={})
    with pytest.raises(ValueError, match="The 'kind' parameter of make_poller must be one of"):
        make_poller("wandb", RecordingSink())
