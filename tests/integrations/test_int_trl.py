"""A real TRL GRPO run (tiny policy, learned proxy reward, zero-weight gold reward) stopped by
EvalStopCallback: examples/trl_grpo_evalstop.py run as a user would run it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="needs pip install -e '.[hf]'")

from evalstop.detectors import Eval, parse_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_grpo_example_stops_when_gold_falls_while_proxy_rises(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "trl_grpo_evalstop.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    curve = {step: (proxy, gold) for step, proxy, gold in summary["curve"]}
    evals = [Eval(step, gold) for step, (_, gold) in sorted(curve.items())]
    expected = parse_spec(summary["detector"]).evaluate(evals)
    assert summary["decision"] == "stop"
    assert (summary["stop_step"], summary["best_step"]) == (expected.stop_step, expected.best_step)
    assert max(curve) == summary["stop_step"]  # training ended at the stop, not at max_steps
    best, stop = summary["best_step"], summary["stop_step"]
    assert curve[stop][0] > curve[best][0]  # the proxy reward was still rising ...
    assert curve[stop][1] < curve[best][1]  # ... while the gold reward fell
    assert summary["best_checkpoint"] == str(tmp_path / f"checkpoint-{best}")
    assert (tmp_path / f"checkpoint-{best}" / "model.safetensors").is_file()
    record = json.loads((tmp_path / "evalstop.json").read_text())
    assert record["best_step"] == best and record["stop_step"] == stop
