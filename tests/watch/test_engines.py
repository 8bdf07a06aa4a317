"""evalstop watch --slurm-job: a real single-node Slurm runs a job that logs a hacking curve; the
sidecar stops it through the service's Slurm adapter (scancel) and exits 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalstop.testbed.slurm_cluster import SlurmCluster, missing, private_cluster

ROOT = Path(__file__).resolve().parents[2]
JOB = """#!/bin/bash
trap 'echo term > {out}/got_term; exit 143' TERM
for v in 0.3 0.5 0.6 0.55 0.5 0.45 0.4 0.35 0.3; do
  echo "{{\\"step\\": $((++i)), \\"acc\\": $v}}" >> {out}/metrics.jsonl
  sleep 1 & wait
done
echo done > {out}/finished
"""


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    if reason := missing():
        pytest.skip(reason)
    with private_cluster("evs-watch-") as cluster:
        yield cluster


def test_slurm_job_is_stopped_through_the_adapter(slurm: SlurmCluster, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(JOB.format(out=tmp_path))
    job_id = slurm.sbatch(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "SLURM_CONF": str(slurm.conf),
           "EVALSTOP_ADAPTER_SETTINGS": json.dumps({"slurm": {"slurm_conf": str(slurm.conf)}})}
    argv = [sys.executable, "-m", "evalstop.cli", "watch", "--metric", "acc", "--log", "jsonl",
            "--logdir", str(tmp_path / "metrics.jsonl"), "--detector", "evalstop:k=2", "--poll", "0.2",
            "--grace", "10", "--slurm-job", job_id]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 3, proc.stderr
    assert f"stopping slurm job {job_id}: stop signal sent" in proc.stderr
    deadline = time.monotonic() + 30
    while not (tmp_path / "got_term").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (tmp_path / "got_term").exists() and not (tmp_path / "finished").exists()
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) < 9
