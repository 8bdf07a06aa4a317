"""evalstop watch against fake veRL, OpenRLHF and NeMo-RL trainers (fake_trainers.py): each run
hacks, the sidecar stops it by SIGTERM and best/ keeps the best eval's checkpoint although the
framework's own rotation deleted it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.utils.tensorboard")

from evalstop.detectors import Eval, parse_spec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CURVE = [0.20, 0.30, 0.45, 0.60, 0.58, 0.55, 0.50, 0.46, 0.40, 0.35, 0.30, 0.25, 0.20, 0.15, 0.10]
DETECTOR = "evalstop:k=3"
TAGS = {"verl": "val-core/openai/gsm8k/acc/mean@1", "openrlhf": "eval/eval_gsm8k_pass1",
        "nemo-rl": "validation/accuracy"}
#: framework -> (log dir, checkpoint dir, a step's checkpoint in it, the weights file in that)
LAYOUT = {
    "verl": ("tensorboard_log/proj/exp", "checkpoints/proj/exp", "global_step_{step}", "actor/model.bin"),
    "openrlhf": ("logs/tensorboard/run", "ckpt", "_actor/global_step{step}", "model.bin"),
    "nemo-rl": ("logs", "results/grpo", "step_{step}", "policy/weights/model.bin"),
}


def watch(root: Path, framework: str, *extra: str) -> subprocess.CompletedProcess[str]:
    logdir, ckpt, _, _ = LAYOUT[framework]
    argv = [sys.executable, "-m", "evalstop.cli", "watch", "--framework", framework, "--logdir",
            str(root / logdir), "--checkpoint-dir", str(root / ckpt), "--detector", DETECTOR,
            "--poll", "0.1", "--grace", "5", *extra, "--",
            sys.executable, str(HERE / "fake_trainers.py"), framework, str(root), ",".join(map(str, CURVE))]
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("framework", sorted(LAYOUT))
def test_stops_the_hacking_run_and_keeps_best_through_rotation(tmp_path: Path, framework: str) -> None:
    proc = watch(tmp_path, framework)
    expected = parse_spec(DETECTOR).evaluate([Eval(i + 1, v) for i, v in enumerate(CURVE)])
    assert expected.stopped and expected.best_step == 4
    assert proc.returncode == 3, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("evalstop watch: step ")]
    assert len(lines) == expected.stop_step  # one line per eval, none after the stop
    assert lines[-1].startswith(f"evalstop watch: step {expected.stop_step} ") and ": STOP (" in lines[-1]
    assert "trained" not in proc.stdout  # SIGTERM ended it before its last step
    _, ckpt, pattern, weights = LAYOUT[framework]
    best = tmp_path / ckpt / "best"
    record = json.loads((best / "EVALSTOP.json").read_text())
    assert (record["step"], record["metric"]) == (expected.best_step, TAGS[framework])
    assert (best / weights).read_text() == f"weights at step {expected.best_step}\n"
    original = tmp_path / ckpt / pattern.format(step=expected.best_step) / weights
    assert not original.exists()  # the framework's rotation deleted it; best/ kept it


def test_shadow_reports_and_lets_it_finish(tmp_path: Path) -> None:
    proc = watch(tmp_path, "nemo-rl", "--shadow")
    assert proc.returncode == 0, proc.stderr
    assert "trained 15 steps" in proc.stdout
    assert "--shadow: would stop" in proc.stderr
    assert json.loads((tmp_path / "results/grpo/best/EVALSTOP.json").read_text())["step"] == 4
