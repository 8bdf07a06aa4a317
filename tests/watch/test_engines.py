"""evalstop watch --slurm-job / --ray-job: a real single-node Slurm, and a real local Ray head, run
a job that logs a hacking curve; the sidecar stops it through the service's adapter for that
engine (scancel; the Jobs API's stop) and exits 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalstop.testbed.cluster import Proc
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


#: A Ray job: rises for three evals, then declines (one eval a second, 30 in all, ~30 s), so the
#: rule fires long before it could finish by itself; SIGTERM leaves a mark.
RAY_JOB = """import json, pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def on_term(*_):
    (out / "got_term").write_text("term")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
values = [0.3, 0.5, 0.6] + [round(0.55 - 0.01 * i, 2) for i in range(27)]
with (out / "metrics.jsonl").open("a") as log:
    for step, value in enumerate(values, 1):
        log.write(json.dumps({"step": step, "acc": value}) + "\\n")
        log.flush()
        time.sleep(1)
(out / "finished").write_text("done")
"""
#: Every wait ends on its condition; this ceiling only turns a hang into a failure (a loaded
#: machine took more than a minute to start a Ray job).
HANG_S = 600.0


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Proc]:
    pytest.importorskip("ray", reason="needs the ray extra: pip install -e '.[ray]'")
    from evalstop.testbed.ray_head import private_head

    with private_head("evs-wr-", 2) as head:  # returns once a job has run on it
        yield head


@pytest.mark.slow
def test_ray_job_is_stopped_through_the_jobs_api(ray_head: Proc, tmp_path: Path) -> None:
    from ray.job_submission import JobSubmissionClient

    address, token = ray_head.info["address"], ray_head.info["token"]
    client = JobSubmissionClient(address, headers={"Authorization": f"Bearer {token}"})
    script = tmp_path / "train.py"
    script.write_text(RAY_JOB)
    sid = client.submit_job(entrypoint=f"{sys.executable} {script} {tmp_path}")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    env |= {"PYTHONPATH": str(ROOT / "src"), "RAY_AUTH_TOKEN": token}
    argv = [sys.executable, "-m", "evalstop.cli", "watch", "--metric", "acc", "--log", "jsonl",
            "--logdir", str(tmp_path / "metrics.jsonl"), "--detector", "evalstop:k=2", "--poll", "0.2",
            "--grace", "20", "--log-timeout", str(HANG_S), "--ray-address", address, "--ray-job", sid]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S, env=env)
    assert proc.returncode == 3, proc.stderr
    assert f"stopping ray job {sid}: stop signal sent" in proc.stderr
    assert client.get_job_status(sid).value == "STOPPED"
    assert (tmp_path / "got_term").read_text() == "term"  # Ray's stop reached the trainer
    assert not (tmp_path / "finished").exists()
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert 5 <= max(steps) < 30, steps  # stopped after the second decline, well before the end
