"""One arm of the testbed: the trace through a FIFO queue onto the Ray head's slots.

The dispatcher is the base scheduler (strict FIFO, as the simulator's ``FIFO()``): a job joins
the queue at its arrival time; while the head of the queue fits in the free slots it is
registered with the EvalStop service (its Ray submission id as the external reference) and
submitted to Ray with ``entrypoint_resources={"slot": width}``; a wider head blocks the jobs
behind it. Slots are free again when Ray reports the job terminal (SUCCEEDED, STOPPED or FAILED).
Submission ids are ``<arm>-<run id>-<job>``, so runs on a shared cluster never collide. Every
time is wall-clock (``time.time()``), relative to the arm's start in the records.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import SLOT, Proc, api
from .workload import JobPlan

TERMINAL = frozenset({"SUCCEEDED", "STOPPED", "FAILED"})
POLL_S = 0.1


@dataclass
class Running:
    plan: JobPlan
    sid: str
    service_id: str
    dispatch_t: float
    submitted_t: float


def run_arm(
    arm: str,
    plan: list[JobPlan],
    root: Path,
    ray: Proc,
    server: Proc,
    *,
    timeout_s: float = 1800.0,
    start_at: float | None = None,
) -> list[dict[str, Any]]:
    """Run the trace in ``arm`` ("shadow" or "enforced") on ``ray.info["slots"]`` slots; one raw
    record per job. ``start_at`` (a ``time.time()``): the trace's time zero, so that two arms run
    at the same time see the same arrivals at the same instants (default: now)."""
    out = root / arm
    out.mkdir(parents=True, exist_ok=True)
    token_file = _create_tenant(server, arm, out, ray)
    ray_api = api(ray.info["address"], ray.info["token"])
    svc = api(server.info["url"], token_file.read_text().strip())
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    t0 = time.time() if start_at is None else start_at
    pending = deque(sorted(plan, key=lambda j: (j.arrival_s, j.name)))
    queue: deque[JobPlan] = deque()
    running: dict[str, Running] = {}
    done: list[dict[str, Any]] = []
    slots = int(ray.info["slots"])
    prefix = sid_prefix(arm, ray)
    try:
        while pending or queue or running:
            now = time.time()
            if now - t0 > timeout_s:
                raise TimeoutError(f"arm {arm}: not finished after {timeout_s} s; running {sorted(running)}")
            while pending and t0 + pending[0].arrival_s <= now:
                queue.append(pending.popleft())
            while queue and sum(r.plan.slots for r in running.values()) + queue[0].slots <= slots:
                job = queue.popleft()
                running[job.name] = _dispatch(prefix + job.name, arm, job, out, ray_api, svc, server)
            if running:
                _reap(ray_api, running, done, t0, out)
            time.sleep(POLL_S)
    finally:
        ray_api.close()
    for record in done:
        record["service"] = _service_view(svc, record["service_id"])
    svc.close()
    return sorted(done, key=lambda r: str(r["name"]))


def sid_prefix(arm: str, ray: Proc) -> str:
    """The Ray submission-id prefix of an arm's jobs (the tenant's scope)."""
    return f"{arm}-{ray.info['run_id']}-" if ray.info.get("run_id") else f"{arm}-"


def _create_tenant(server: Proc, arm: str, out: Path, ray: Proc) -> Path:
    admin = api(server.info["url"], server.info["admin"])
    prefix = sid_prefix(arm, ray)
    scope = {
        "ray": {"job_id_prefixes": [prefix], "metadata": {"evalstop_arm": arm}},
        "checkpoint_prefixes": [str(out.resolve())],
    }
    resp = admin.post("/v1/tenants", json={"name": arm, "shadow": arm == "shadow", "scope": scope})
    admin.close()
    resp.raise_for_status()
    token_file = out / "tenant-token"
    token_file.touch(mode=0o600)
    token_file.write_text(resp.json()["token"])
    return token_file


def _dispatch(sid: str, arm: str, job: JobPlan, out: Path, ray_api: Any, svc: Any, server: Proc) -> Running:
    token_file = out / "tenant-token"
    job_dir = out / job.name
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "plan.json").write_text(json.dumps(job.to_json()))
    reg = svc.post(
        "/v1/jobs",
        json={
            "external_ref": sid,
            "target": "ray",
            "name": job.name,
            "metric": "eval_score",
            "grace_period_s": 2.0,
        },
    )
    reg.raise_for_status()
    service_id = str(reg.json()["id"])
    entrypoint = shlex.join(
        [
            sys.executable,
            "-m",
            "evalstop.testbed.job",
            str(job_dir / "plan.json"),
            str(job_dir),
            "--url",
            server.info["url"],
            "--job-id",
            service_id,
            "--token-file",
            str(token_file),
        ]
    )
    dispatch_t = time.time()
    resp = ray_api.post(
        "/api/jobs/",
        json={
            "entrypoint": entrypoint,
            "submission_id": sid,
            "entrypoint_resources": {SLOT: job.slots},
            "metadata": {"evalstop_arm": arm},
        },
    )
    if resp.status_code >= 400:
        raise RuntimeError(f"Ray refused job {sid}: {resp.status_code} {resp.text[:500]}")
    return Running(job, sid, service_id, dispatch_t, time.time())


def _reap(
    ray_api: Any, running: dict[str, Running], done: list[dict[str, Any]], t0: float, out: Path
) -> None:
    import httpx

    try:
        resp = ray_api.get("/api/jobs/")
    except httpx.TransportError:  # a busy dashboard: poll again (the arm's timeout bounds it)
        return
    if resp.status_code >= 500:
        return
    resp.raise_for_status()
    by_sid = {j.get("submission_id"): j for j in resp.json()}
    for name, run in list(running.items()):
        info = by_sid.get(run.sid)
        if info is None or info.get("status") not in TERMINAL:
            continue
        seen_t = time.time()
        del running[name]
        done.append(_record(run, info, seen_t, t0, out / name))


def _record(run: Running, info: dict[str, Any], seen_t: float, t0: float, job_dir: Path) -> dict[str, Any]:
    events = (
        [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines() if line.strip()]
        if (job_dir / "events.jsonl").exists()
        else []
    )
    proc_start = next((e["t"] for e in events if e["event"] == "start"), None)
    evals = [e for e in events if e["event"] == "eval"]
    ray_start, ray_end = info.get("start_time"), info.get("end_time")
    end_t = _ms(ray_end) or seen_t
    return {
        "name": run.plan.name,
        "kind": run.plan.kind,
        "seed": run.plan.seed,
        "slots": run.plan.slots,
        "sid": run.sid,
        "service_id": run.service_id,
        "ray_status": info.get("status"),
        "arrival_s": run.plan.arrival_s,
        "dispatch_s": run.dispatch_t - t0,
        "submitted_s": run.submitted_t - t0,
        "ray_start_s": _ms(ray_start) - t0 if _ms(ray_start) else None,
        "proc_start_s": None if proc_start is None else proc_start - t0,
        "end_s": end_t - t0,
        "seen_end_s": seen_t - t0,
        "evals": [
            {k: e[k] for k in ("step", "score", "gold", "checkpoint", "decision", "t")} | {"t": e["t"] - t0}
            for e in evals
        ],
        "sigterm": any(e["event"] == "sigterm" for e in events),
    }


def _ms(value: Any) -> float:
    """A Ray time in ms since the epoch as seconds (0.0 when Ray has none)."""
    return value / 1000 if isinstance(value, (int, float)) and value > 0 else 0.0


def _service_view(svc: Any, service_id: str) -> dict[str, Any]:
    job = svc.get(f"/v1/jobs/{service_id}")
    job.raise_for_status()
    decisions = svc.get(f"/v1/jobs/{service_id}/decisions")
    decisions.raise_for_status()
    body = job.json()
    return {"state": body["state"], "stopped_at": body["stopped_at"], "decisions": decisions.json()}


def warm_up(ray: Proc, timeout_s: float = 180.0) -> float:
    """Run one job that only imports what a training job imports, so that neither arm pays the
    head's first-job costs (worker pool, bytecode, page cache). Returns its wall time."""
    code = "import numpy, evalstop.testbed.job, evalstop.integrations._remote, evalstop.workloads.bank"
    client = api(ray.info["address"], ray.info["token"])
    started = time.time()
    try:
        body = {"entrypoint": shlex.join([sys.executable, "-c", code]), "entrypoint_resources": {SLOT: 1}}
        resp = _first_submit(client, body, started + timeout_s)
        if resp.status_code >= 400:
            raise RuntimeError(f"Ray refused the warm-up job: {resp.status_code} {resp.text[:500]}")
        sid = resp.json()["submission_id"]
        while time.time() - started < timeout_s:
            status = client.get(f"/api/jobs/{sid}").json().get("status")
            if status == "SUCCEEDED":
                return time.time() - started
            if status in TERMINAL:
                logs = client.get(f"/api/jobs/{sid}/logs").json().get("logs", "")
                raise RuntimeError(f"the warm-up job ended {status}: {logs[-2000:]}")
            time.sleep(POLL_S)
    finally:
        client.close()
    raise TimeoutError(f"the warm-up job did not finish in {timeout_s} s")


def _first_submit(client: Any, body: dict[str, Any], deadline: float) -> Any:
    """POST a job, again while a just-started head's job agent is not up (5xx, dropped connection)."""
    import httpx

    while True:
        try:
            resp = client.post("/api/jobs/", json=body)
            if resp.status_code < 500 or time.time() > deadline:
                return resp
        except httpx.TransportError:
            if time.time() > deadline:
                raise
        time.sleep(1.0)
