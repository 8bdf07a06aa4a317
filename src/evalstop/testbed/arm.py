"""One arm of the testbed: the trace through a FIFO queue onto the engine's slots.

The dispatcher is the base scheduler (strict FIFO, as the simulator's ``FIFO()``): a job joins
the queue at its arrival time; while the head of the queue fits in the arm's free slots it is
handed to the engine (Ray or Slurm, :mod:`.engine`) with its width, and the engine registers it
with the EvalStop service (its engine reference as the external reference) before it can start;
a wider head blocks the jobs behind it. Slots are free again when the engine reports the job
terminal. An arm keeps to its own ``slots`` (two arms may share one cluster). Every time is
wall-clock (``time.time()``), relative to the arm's start in the records.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import Proc, api
from .engine import Engine, Status
from .workload import JobPlan

POLL_S = 0.1
WARM_UP_CODE = "import numpy, evalstop.testbed.job, evalstop.integrations._remote, evalstop.workloads.bank"


@dataclass
class Running:
    plan: JobPlan
    ref: str
    service_id: str
    dispatch_t: float
    submitted_t: float


def run_arm(
    arm: str,
    plan: list[JobPlan],
    root: Path,
    engine: Engine,
    server: Proc,
    *,
    slots: int,
    timeout_s: float = 1800.0,
    start_at: float | None = None,
) -> list[dict[str, Any]]:
    """Run the trace in ``arm`` ("shadow" or "enforced") on ``slots`` of the engine's slots; one
    raw record per job. ``start_at`` (a ``time.time()``): the trace's time zero, so that two arms
    run at the same time see the same arrivals at the same instants (default: now)."""
    out = root / arm
    out.mkdir(parents=True, exist_ok=True)
    token_file = _create_tenant(server, arm, out, engine)
    svc = api(server.info["url"], token_file.read_text().strip())
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    t0 = time.time() if start_at is None else start_at
    pending = deque(sorted(plan, key=lambda j: (j.arrival_s, j.name)))
    queue: deque[JobPlan] = deque()
    running: dict[str, Running] = {}
    done: list[dict[str, Any]] = []
    while pending or queue or running:
        now = time.time()
        if now - t0 > timeout_s:
            raise TimeoutError(f"arm {arm}: not finished after {timeout_s} s; running {sorted(running)}")
        while pending and t0 + pending[0].arrival_s <= now:
            queue.append(pending.popleft())
        while queue and sum(r.plan.slots for r in running.values()) + queue[0].slots <= slots:
            job = queue.popleft()
            running[job.name] = _dispatch(arm, job, out, engine, svc, server, token_file)
        if running:
            _reap(engine, running, done, t0, out)
        time.sleep(POLL_S)
    for record in done:
        record["service"] = _service_view(svc, record["service_id"])
    svc.close()
    return sorted(done, key=lambda r: str(r["name"]))


def _create_tenant(server: Proc, arm: str, out: Path, engine: Engine) -> Path:
    admin = api(server.info["url"], server.info["admin"])
    scope = {**engine.tenant_scope(arm), "checkpoint_prefixes": [str(out.resolve())]}
    resp = admin.post("/v1/tenants", json={"name": arm, "shadow": arm == "shadow", "scope": scope})
    admin.close()
    resp.raise_for_status()
    token_file = out / "tenant-token"
    token_file.touch(mode=0o600)
    token_file.write_text(resp.json()["token"])
    return token_file


def _dispatch(
    arm: str, job: JobPlan, out: Path, engine: Engine, svc: Any, server: Proc, token_file: Path
) -> Running:
    job_dir = out / job.name
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "plan.json").write_text(json.dumps(job.to_json()))
    id_file = job_dir / "service-job-id"
    registered: list[str] = []

    def register(ref: str) -> None:
        reg = svc.post(
            "/v1/jobs",
            json={
                "external_ref": ref,
                "target": engine.target,
                "name": job.name,
                "metric": "eval_score",
                "grace_period_s": 2.0,
            },
        )
        reg.raise_for_status()
        registered.append(str(reg.json()["id"]))
        id_file.write_text(registered[0])

    argv = [
        sys.executable,
        "-m",
        "evalstop.testbed.job",
        str(job_dir / "plan.json"),
        str(job_dir),
        "--url",
        server.info["url"],
        "--job-id-file",
        str(id_file),
        "--token-file",
        str(token_file),
    ]
    dispatch_t = time.time()
    ref = engine.submit(arm, job.name, argv, job_dir, register, width=job.slots)
    return Running(job, ref, registered[0], dispatch_t, time.time())


def _reap(
    engine: Engine, running: dict[str, Running], done: list[dict[str, Any]], t0: float, out: Path
) -> None:
    statuses = engine.poll([r.ref for r in running.values()])
    if statuses is None:  # the engine did not answer this time
        return
    for name, run in list(running.items()):
        status = statuses.get(run.ref)
        if status is None or not status.terminal:
            continue
        seen_t = time.time()
        del running[name]
        done.append(_record(run, status, engine, seen_t, t0, out / name))


def _record(
    run: Running, status: Status, engine: Engine, seen_t: float, t0: float, job_dir: Path
) -> dict[str, Any]:
    events = (
        [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines() if line.strip()]
        if (job_dir / "events.jsonl").exists()
        else []
    )
    proc_start = next((e["t"] for e in events if e["event"] == "start"), None)
    evals = [e for e in events if e["event"] == "eval"]
    # The engine's end time where it is finer than the poll, else when the dispatcher saw the end.
    end_t = status.end_t if status.end_t and engine.clock_s < POLL_S else seen_t
    return {
        "name": run.plan.name,
        "kind": run.plan.kind,
        "seed": run.plan.seed,
        "slots": run.plan.slots,
        "engine": engine.target,
        "ref": run.ref,
        "service_id": run.service_id,
        "engine_status": status.state,
        "engine_comment": status.comment,
        "engine_slots": status.slots,
        "arrival_s": run.plan.arrival_s,
        "dispatch_s": run.dispatch_t - t0,
        "submitted_s": run.submitted_t - t0,
        "engine_start_s": None if status.start_t is None else status.start_t - t0,
        "engine_end_s": None if status.end_t is None else status.end_t - t0,
        "proc_start_s": None if proc_start is None else proc_start - t0,
        "end_s": end_t - t0,
        "seen_end_s": seen_t - t0,
        "evals": [
            {k: e[k] for k in ("step", "score", "gold", "checkpoint", "decision", "t")} | {"t": e["t"] - t0}
            for e in evals
        ],
        "sigterm": any(e["event"] == "sigterm" for e in events),
    }


def _service_view(svc: Any, service_id: str) -> dict[str, Any]:
    job = svc.get(f"/v1/jobs/{service_id}")
    job.raise_for_status()
    decisions = svc.get(f"/v1/jobs/{service_id}/decisions")
    decisions.raise_for_status()
    body = job.json()
    return {"state": body["state"], "stopped_at": body["stopped_at"], "decisions": decisions.json()}


def warm_up(engine: Engine, plan: list[JobPlan], timeout_s: float = 180.0) -> float:
    """Run one job that only imports what a training job imports, so that neither arm pays the
    engine's first-job costs (worker pool, bytecode, page cache). Returns its wall time."""
    code = WARM_UP_CODE
    if any(j.kind.startswith("grpo") for j in plan):
        code += ", evalstop.workloads._grpo_eval, trl"
    return engine.warm_up([sys.executable, "-c", code], timeout_s)
