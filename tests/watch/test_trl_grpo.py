"""A real TRL GRPO run on CPU, logging to TensorBoard, wrapped by
``evalstop watch --framework trl -- python trl_grpo_train.py ...``: the hacking configuration is
stopped by SIGTERM and best/ holds the best eval's weights; the healthy one runs to its end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="needs pip install -e '.[hf]'")
safetensors_torch = pytest.importorskip("safetensors.torch")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
METRIC = "eval/rewards/gold/mean"
DETECTOR = "evalstop:k=2"


def wrap(out: Path, config: str, max_steps: int) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "evalstop.cli", "watch", "--framework", "trl", "--checkpoint-dir", str(out),
            "--metric", METRIC, "--detector", DETECTOR, "--grace", "60", "--poll", "0.25", "--",
            sys.executable, str(HERE / "trl_grpo_train.py"), "--output_dir", str(out), "--config", config,
            "--max_steps", str(max_steps)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(argv, capture_output=True, text=True, timeout=1200, env=env)


def evals(stderr: str) -> dict[int, float]:
    out = {}
    for line in stderr.splitlines():
        if line.startswith("evalstop watch: step "):
            step, rest = line.removeprefix("evalstop watch: step ").split(" ", 1)
            out[int(step)] = float(rest.split("=", 1)[1].split(":", 1)[0])
    return out


@pytest.mark.slow
def test_hacking_run_is_stopped_and_best_holds_the_best_weights(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = wrap(out, "hacking", 40)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "trained to step" not in proc.stdout  # SIGTERM ended it
    seen = evals(proc.stderr)
    best_step = max(seen, key=lambda s: seen[s])
    stop_line = next(x for x in proc.stderr.splitlines() if ": STOP (" in x)
    assert f"best step {best_step} " in stop_line and max(seen) < 40
    record = json.loads((out / "best" / "EVALSTOP.json").read_text())
    assert (record["step"], record["metric"]) == (best_step, METRIC)
    original = out / f"checkpoint-{best_step}"
    if original.exists():  # the stop came before save_total_limit=2 rotated it: delete it as the
        shutil.rmtree(original)  # rotation would; best/ must not depend on it either way
    kept = safetensors_torch.load_file(str(out / "best" / "model.safetensors"))
    copies = tmp_path / "out.saved"
    saved = safetensors_torch.load_file(str(copies / f"step-{best_step}" / "model.safetensors"))
    later = safetensors_torch.load_file(str(copies / f"step-{max(seen)}" / "model.safetensors"))
    assert kept.keys() == saved.keys()
    assert all(bool((kept[k] == saved[k]).all()) for k in kept)
    assert any(not bool((kept[k] == later[k]).all()) for k in kept)  # not just any checkpoint


@pytest.mark.slow
def test_healthy_run_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = wrap(out, "healthy", 20)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trained to step 20" in proc.stdout
    assert ": STOP (" not in proc.stderr and sorted(evals(proc.stderr)) == [5, 10, 15, 20]
    assert "the rule did not fire" in proc.stderr.splitlines()[-1]
