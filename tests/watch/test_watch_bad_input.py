"""evalstop watch on bad input: one line each, the right exit status, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evalstop.cli import main

PY = sys.executable


def jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def watch(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(["watch", "--poll", "0.05", "--log-timeout", "0.3", *argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, [x for x in captured.err.splitlines() if x.startswith("evalstop watch")]


def test_missing_log_waits_then_says_so_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = watch(capsys, "--metric", "acc", "--logdir", str(tmp_path / "nowhere"), "--",
                        PY, "-c", "import time; time.sleep(1.0)")
    assert code == 0
    waiting = [x for x in lines if "still waiting" in x]
    assert len(waiting) == 1 and f"no tensorboard log at {tmp_path / 'nowhere'}" in waiting[0]
    assert lines[-1].endswith(f"before its first eval: no tensorboard log at {tmp_path / 'nowhere'}")


def test_metric_that_never_appears_lists_the_tags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = jsonl(tmp_path / "m.jsonl", [{"step": 1, "eval_acc": 0.5, "loss": 1.0}])
    code, lines = watch(capsys, "--metric", "eval/acc", "--log", "jsonl", "--logdir", str(log), "--",
                        PY, "-c", "import time; time.sleep(1.0)")
    assert code == 0
    said = [x for x in lines if "pass --metric with one of them" in x]
    assert len(said) == 2  # once while waiting, once at the end
    assert "no 'eval/acc' in " in said[0] and "the log has eval_acc, loss;" in said[0]


def test_checkpoint_pattern_matching_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = jsonl(tmp_path / "m.jsonl", [{"step": s, "acc": v} for s, v in [(10, 0.5), (20, 0.6)]])
    (tmp_path / "ckpt" / "ckpt_10").mkdir(parents=True)
    code, lines = watch(capsys, "--metric", "acc", "--log", "jsonl", "--logdir", str(log),
                        "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoints", "checkpoint-{step}",
                        "--", PY, "-c", "pass")
    assert code == 0
    (line,) = [x for x in lines if "matches nothing" in x]
    where = tmp_path / "ckpt"
    assert f"--checkpoints 'checkpoint-{{step}}' matches nothing in {where} (it holds: ckpt_10)" in line


def test_child_exiting_before_first_eval_keeps_its_status(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    log = jsonl(tmp_path / "m.jsonl", [{"step": 1, "loss": 2.0}])
    code, lines = watch(capsys, "--metric", "acc", "--log", "jsonl", "--logdir", str(log), "--",
                        PY, "-c", "raise SystemExit(7)")
    assert code == 7
    assert lines[-1].startswith("evalstop watch: the training command exited with status 7 before its first "
                                "eval: no 'acc' in ")


def test_ambiguous_glob_asks_for_metric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = jsonl(tmp_path / "v.jsonl", [{"step": 1, "data": {"val-core/a/acc/mean@1": 0.1,
                                                             "val-core/b/acc/mean@1": 0.2}}])
    code, lines = watch(capsys, "--framework", "verl", "--log", "jsonl", "--logdir", str(log), "--",
                        PY, "-c", "pass")
    assert code == 0
    assert any("several tags match 'val-core/*/*/mean@*': val-core/a/acc/mean@1, val-core/b/acc/mean@1" in x
               for x in lines)


@pytest.mark.parametrize(("argv", "message"), [
    (["--metric", "m", "--logdir", "x"],
     "give exactly one target: -- COMMAND, --pid, --ray-job or --slurm-job (got none)"),
    (["--logdir", "x", "--", "true"], "--metric is required without --framework"),
    (["--metric", "m", "--logdir", "x", "--grace", "0", "--", "true"],
     "--grace must be a number > 0. Got 0.0"),
    (["--metric", "m", "--logdir", "x", "--checkpoint-dir", "c", "--checkpoints", "ckpt", "--", "true"],
     "--checkpoints must contain '{step}' once"),
    (["--framework", "verl", "--", "true"], "--logdir is required (verl writes it to $TENSORBOARD_DIR"),
    (["--metric", "m", "--logdir", "x", "--detector", "cusum:k=oops", "--", "true"],
     "--detector 'cusum:k=oops'"),
    (["--metric", "m", "--logdir", "x", "--", "/nonexistent/train"], "cannot start or reach the target"),
    (["--metric", "m", "--logdir", "x", "--pid", "999999999"], "cannot start or reach the target"),
])
def test_bad_options_one_line_exit_2(argv: list[str], message: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = watch(capsys, *argv)
    assert code == 2 and len(lines) == 1 and message in lines[0], lines


def test_sigterm_ignored_gets_sigkill_after_grace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "m.jsonl"
    script = (
        "import json, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"f = open({str(log)!r}, 'a')\n"
        "for i, v in enumerate([0.5, 0.6, 0.5, 0.4, 0.3, 0.2], 1):\n"
        "    f.write(json.dumps({'step': i, 'acc': v}) + '\\n'); f.flush()\n"
        "time.sleep(60)\n"
    )
    code, lines = watch(capsys, "--metric", "acc", "--log", "jsonl", "--logdir", str(log), "--detector",
                        "evalstop:k=2", "--grace", "0.5", "--", PY, "-c", script)
    assert code == 3
    assert any("SIGTERM to process group" in x and "SIGKILL after 0.5 s" in x for x in lines)
    assert lines[-1].endswith("exit 3")
