"""``bench/watch_cost.py`` runs end to end on a small file and reports figures that make sense.

A smoke test, not a timing test: the benchmark itself is run by hand (docs/integrations.md, Cost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.utils.tensorboard")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "watch_cost.py"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          check=False, env=env)


def test_small_run_reports_latency_within_a_poll_and_idle_cpu() -> None:
    done = bench("--scalars", "1000", "--trials", "2", "--idle-s", "1", "--poll", "0.2", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["scalars"], result["trials"], result["poll_s"]) == (1000, 2, 0.2)
    assert 0 < result["latency_p50_s"] <= result["latency_p99_s"] <= result["latency_max_s"] < 5
    assert result["first_read_s"] > 0 and 0 <= result["idle_cpu_pct"] < 100 and result["file_mib"] > 0


def test_bad_arguments_exit_2() -> None:
    done = bench("--scalars", "5")
    assert done.returncode == 2 and "--scalars must be >= 100" in done.stderr
