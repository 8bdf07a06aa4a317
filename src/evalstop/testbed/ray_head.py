"""A private Ray head on loopback, and the one test of its readiness: a job ran on it.

Everything that starts a Ray head of its own (the testbed, the enforcement tests, the Ray sweep
and Ray Tune tests) starts it here; a test does it through :func:`private_head`. The head binds
to 127.0.0.1 on free ports, keeps its temp dir and HOME under ``root``, has token authentication
on, and is stopped by pid (:func:`.cluster.stop`).

Ready means a job submitted through the Jobs API has *finished*: the dashboard, its job
module, the head's job agent, the raylet and a worker all answered. "Ray runtime started" in
``ray start``'s log, a listening port or a ``GET /api/jobs/`` that answers each come earlier,
and a test that starts on them fails on a loaded machine. Two more guards for a loaded
machine: the dashboard's own limit for its job module to start (30 s in Ray 2.60, after which
that module stays dead while ``ray start`` keeps running) is raised, and a head whose start-up
failed for good is replaced by a fresh one on fresh ports, up to ``attempts`` heads in all.
Failed for good: ``ray start`` exited (Ray 2.60 gives its raylet a fixed 30 s to register, which
no setting changes; at load 40 on 2 cores it took longer, "The current node timed out during
startup"), or the dashboard gave a module up. The ceiling is only a guard against a hang:
nothing waits on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .cluster import SLOT, Proc, api, ray_ports, spawn, stop

# the dashboard's limit for a module subprocess to start; 30 s by default, too short at load 4
MODULE_START_S = "600"
PROBE_STATES_DONE = ("SUCCEEDED",)
PROBE_STATES_FAILED = ("FAILED", "STOPPED")


class HeadBroken(RuntimeError):
    """This head's start-up failed for good (a fresh head may still start)."""


def start_ray(root: Path, slots: int, *, token_auth: bool = True, attempts: int = 3,
              ceiling_s: float = 900.0) -> Proc:
    """A Ray head with ``slots`` CPUs and ``slots`` of the custom resource ``slot``, ready (a job
    ran on it). ``info``: ``address`` (the Jobs API), ``gcs`` (for ``ray.init``), ``token`` (empty
    without ``token_auth``: a driver in a process that imported ray first cannot switch it on),
    ``slots``, ``env`` (JSON: the environment a client of this head needs)."""
    failures = []
    for attempt in range(1, attempts + 1):
        head = _launch(root / f"h{attempt}", slots, token_auth)
        try:
            _wait_ready(head, ceiling_s)
            return head
        except HeadBroken as exc:
            failures.append(f"attempt {attempt}: {exc}")
            stop(head)
    raise RuntimeError("the Ray head did not start:\n" + "\n".join(failures))


@contextlib.contextmanager
def private_head(prefix: str = "evs-ray-", slots: int = 2, *, token_auth: bool = True) -> Iterator[Proc]:
    """:func:`start_ray` in a fresh temporary directory (named ``prefix…``, short: Ray's socket
    paths have a length limit); on exit the head is stopped and the directory removed, also when
    the head never became ready."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        head = start_ray(root, slots, token_auth=token_auth)
        try:
            yield head
        finally:
            stop(head)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def head_env(head: Proc) -> dict[str, str]:
    """This process's environment with the head's own (its HOME and token), no RAY_ADDRESS."""
    own: dict[str, str] = json.loads(head.info["env"])
    return _without_address({**os.environ, **own})


def _without_address(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}


def _launch(root: Path, slots: int, token_auth: bool) -> Proc:
    (root / "home").mkdir(parents=True, exist_ok=True)
    temp_dir = root / "ray"  # short: Ray's unix socket paths have a length limit
    token = secrets.token_hex(16) if token_auth else ""
    # no prestarted workers: two fewer Python start-ups inside Ray's 30 s for the raylet to register
    own = {"HOME": str(root / "home"), "RAY_JOB_STOP_WAIT_TIME_S": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": MODULE_START_S,
           "RAY_enable_worker_prestart": "0"}
    if token_auth:
        own |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env = _without_address({**os.environ, **own})
    gcs, dash, nm, om, client, agent, agent_grpc, metrics, rt_env, workers = ray_ports()
    ray = Path(sys.executable).with_name("ray")
    cmd = [str(ray), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
           f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
           f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--ray-client-server-port={client}",
           f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
           f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={rt_env}",
           f"--min-worker-port={workers}", f"--max-worker-port={workers + 40}", f"--num-cpus={slots}",
           f"--resources={json.dumps({SLOT: slots})}", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    log = root / "ray-start.log"
    info = {"address": f"http://127.0.0.1:{dash}", "gcs": f"127.0.0.1:{gcs}", "token": token,
            "slots": str(slots), "env": json.dumps(own)}
    return Proc(spawn(cmd, env, log), log, str(temp_dir), info)


def _wait_ready(head: Proc, ceiling_s: float) -> None:
    """Submit a job that does nothing, then follow it until it has run."""
    import httpx

    probe = f"evalstop-ready-{secrets.token_hex(4)}"
    submitted = False
    deadline = time.monotonic() + ceiling_s
    with api(head.info["address"], head.info["token"]) as client:
        while True:
            _check_alive(head)
            if time.monotonic() > deadline:
                raise HeadBroken(f"no job ran within {ceiling_s:.0f} s: {head.tail()}")
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if not submitted:
                    submitted = _submit(client, probe)
                if submitted:
                    status = client.get(f"/api/jobs/{probe}").json().get("status")
                    if status in PROBE_STATES_DONE:
                        return
                    if status in PROBE_STATES_FAILED:
                        logs = client.get(f"/api/jobs/{probe}/logs").text[-2000:]
                        raise HeadBroken(f"the readiness job ended {status}: {logs}")
            time.sleep(0.5)


def _submit(client: Any, probe: str) -> bool:
    # the server waits up to 10 s for its job agent: a shorter client timeout would never see it
    r = client.post("/api/jobs/", json={"entrypoint": "true", "submission_id": probe}, timeout=120)
    # 400 "already exists": an earlier attempt got through after this client stopped listening
    return bool(r.status_code == 200 or (r.status_code == 400 and "already exists" in r.text))


def _check_alive(head: Proc) -> None:
    if head.proc is not None and head.proc.poll() is not None:
        raise HeadBroken(f"ray start exited: {head.tail()}")
    log = Path(head.marker) / "session_latest" / "logs" / "dashboard.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    if re.search(r"Module \w+ failed to start", text):  # a dashboard module gave up for good
        raise HeadBroken(f"the Ray dashboard gave a module up: {text[-2000:]}")
