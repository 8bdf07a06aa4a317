"""Start a private Ray head for a test: free ports, its own temp dir and HOME, token auth on.

Stopped by signalling the ``ray start --block`` process (which tears down what it started) and
then killing, by pid, any process still naming this head's temp dir. Never ``ray stop``: other
Ray instances on the machine are not ours.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from evalstop.testbed.cluster import pids_naming, ray_ports

RAY = Path(sys.executable).with_name("ray")


@dataclass
class RayHead:
    dashboard_url: str
    token: str
    temp_dir: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str]


def start_head(root: Path, *, stop_wait_s: int = 1, timeout_s: float = 240.0) -> RayHead:
    (root / "home").mkdir(parents=True, exist_ok=True)
    temp_dir = root / "ray"  # short path: Ray's unix sockets have a length limit
    token = secrets.token_hex(16)
    env = {**os.environ, "HOME": str(root / "home"), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
           "RAY_JOB_STOP_WAIT_TIME_S": str(stop_wait_s), "RAY_USAGE_STATS_ENABLED": "0"}
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        env.pop(var, None)
    # the testbed's port picker: no other port inside the worker range (else `ray start` refuses)
    gcs, dash, nm, om, client, agent, agent_grpc, metrics, rt_env, workers = ray_ports()
    cmd = [str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
           f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
           f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--ray-client-server-port={client}",
           f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
           f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={rt_env}",
           f"--min-worker-port={workers}", f"--max-worker-port={workers + 40}",
           "--num-cpus=2", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    log = open(root / "ray-start.log", "wb")  # noqa: SIM115 - lives as long as the head
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    head = RayHead(f"http://127.0.0.1:{dash}", token, temp_dir, proc, env)
    _wait_ready(head, root, timeout_s)
    return head


def _wait_ready(head: RayHead, root: Path, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if head.proc.poll() is not None:
            raise RuntimeError(f"ray start exited: {(root / 'ray-start.log').read_text()[-3000:]}")
        try:
            # ready = a job can be submitted: the jobs API answers before the job agent is up,
            # and a submission then fails with 500 "No available agent" (seen at load 20)
            r = httpx.post(f"{head.dashboard_url}/api/jobs/", timeout=5,
                           headers={"Authorization": f"Bearer {head.token}"},
                           json={"entrypoint": "true", "submission_id": "readiness-probe"})
            if r.status_code == 200 or (r.status_code == 400 and "already" in r.text):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    stop_head(head)
    raise RuntimeError(f"Ray dashboard not ready after {timeout_s} s: "
                       f"{(root / 'ray-start.log').read_text()[-3000:]}")


def stop_head(head: RayHead, timeout_s: float = 20.0) -> None:
    if head.proc.poll() is None:
        head.proc.send_signal(signal.SIGTERM)
        try:
            head.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            head.proc.kill()
            head.proc.wait()
    deadline = time.monotonic() + 5
    while pids_naming(str(head.temp_dir)) and time.monotonic() < deadline:
        time.sleep(0.25)
    for pid in pids_naming(str(head.temp_dir)):  # stragglers of this head only, by pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
