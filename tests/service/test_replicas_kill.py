"""Two real `evalstop serve` replicas on one real PostgreSQL, under load from clients that send
every score to a random replica (sometimes to both at once), with replica B SIGKILLed three times
and restarted. Stops go to a loopback webhook receiver that records every request.

Checked at the end: every acknowledged score is stored (0 lost), each stopped job has exactly
one decision, and every stop was delivered (pin, signal) with one Idempotency-Key per action.
The figures are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from evalstop.service import domain
from evalstop.service.store import decisions, jobs, metadata, open_store, scores

from ._support import ADMIN, free_port, wait_for
from .stop_hook import StopHook

pytestmark = pytest.mark.slow
N_JOBS, N_STEPS, KILLS, CLIENTS = 6, 26, 3, 3


class Replica:
    def __init__(self, name: str, db: str, hook: str, tmp: Path) -> None:
        self.name, self.db, self.hook, self.tmp = name, db, hook, tmp
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self, wait: bool = True) -> None:
        port = free_port()
        env = {**os.environ, "EVALSTOP_ADMIN_TOKEN": ADMIN, "EVALSTOP_WORKER_POLL_S": "0.05",
               "EVALSTOP_WORKER_LEASE_S": "2", "EVALSTOP_BACKOFF_BASE_S": "0.05",
               "EVALSTOP_BACKOFF_MAX_S": "0.5",
               "EVALSTOP_ADAPTER_SETTINGS": json.dumps({"webhook": {"url": self.hook, "secret": "s"}})}
        log = (self.tmp / f"{self.name}.log").open("ab")
        argv = [sys.executable, "-m", "evalstop.cli", "serve", "--database-url", self.db, "--port", str(port)]
        self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"
        if wait:
            self.wait_up()

    def wait_up(self) -> None:
        wait_for(self._up, 90, f"replica {self.name} to answer")

    def _up(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, (self.tmp / f"{self.name}.log").read_text()
        try:
            return httpx.get(self.base + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)


@pytest.fixture
def fresh_pg(postgres_url: str) -> Iterator[str]:
    engine = sa.create_engine(postgres_url)
    found = sa.MetaData()
    found.reflect(engine)
    found.drop_all(engine)
    engine.dispose()
    yield postgres_url
    store = open_store(postgres_url)
    metadata.drop_all(store.engine)
    store.dispose()


def curve(i: int) -> list[float]:
    """Job i rises, then falls from step 8 + 3i (k=2 fires two evals later); the last never falls."""
    peak = 8 + 3 * i if i < N_JOBS - 1 else N_STEPS
    return [0.3 + 0.01 * s if s <= peak else 0.3 + 0.01 * peak - 0.02 * (s - peak) for s in range(N_STEPS)]


def test_two_replicas_one_killed_three_times(fresh_pg: str, tmp_path: Path) -> None:
    state: dict[str, Any] = {"log": [], "stopped": set(), "lock": threading.Lock()}
    hook = ThreadingHTTPServer(("127.0.0.1", 0), StopHook)
    hook.state = state  # type: ignore[attr-defined]
    threading.Thread(target=hook.serve_forever, args=(0.05,), daemon=True).start()
    hook_url = f"http://127.0.0.1:{hook.server_address[1]}/hook"
    store = open_store(fresh_pg)
    domain.create_tenant(store, "acme", scope={"webhook": {"url_prefixes": [hook_url]}})
    job_ids = []
    for i in range(N_JOBS):
        spec = domain.JobSpec(external_ref=f"w{i}", target="webhook", detector="evalstop:k=2",
                              grace_period_s=0)
        job_ids.append(domain.register_job(store, "acme", spec, target_settings={"url": hook_url})["id"])
    replicas = [Replica(n, fresh_pg, hook_url, tmp_path) for n in ("a", "b")]
    t0 = time.monotonic()
    for r in replicas:
        r.start(wait=False)  # both start at once (each takes seconds on a busy machine)
    for r in replicas:
        r.wait_up()
    timings = {"start": time.monotonic() - t0}
    acked: dict[tuple[str, int], float] = {}
    errors: list[str] = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {ADMIN}"}

    http = httpx.Client(timeout=10, headers=headers)  # one pool: no TLS context per request

    def post(base: str, job_id: str, step: int, value: float) -> bool:
        try:
            r = http.post(f"{base}/v1/jobs/{job_id}/scores", json={"step": step, "value": value})
        except httpx.HTTPError:
            return False
        if r.status_code != 200:
            errors.append(f"{r.status_code} {r.text}")
        return r.status_code == 200

    def send_all(targets: list[Replica], job_id: str, step: int, value: float) -> list[bool]:
        """Post the score to each target at once (two replicas ingesting one job concurrently)."""
        results = [False] * len(targets)

        def send(j: int) -> None:
            results[j] = post(targets[j].base, job_id, step, value)

        threads = [threading.Thread(target=send, args=(j,)) for j in range(len(targets))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    def client(k: int) -> None:
        rng = random.Random(k)
        for step in range(N_STEPS):
            for i in range(k, N_JOBS, CLIENTS):
                value = curve(i)[step]
                while True:  # until one replica acknowledges (the other may be dead)
                    targets = rng.sample(replicas, 2 if rng.random() < 0.3 else 1)
                    if any(send_all(targets, job_ids[i], step, value)):
                        with lock:
                            acked[(job_ids[i], step)] = value
                        break
                    time.sleep(0.05)
            time.sleep(0.02)

    clients = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in clients:
        t.start()
    try:
        for _ in range(KILLS):
            time.sleep(1.5)
            replicas[1].kill()
            time.sleep(0.5)
            replicas[1].start()
        for t in clients:
            t.join(120)
        timings["load"] = time.monotonic() - t0 - timings["start"]
        stopping = job_ids[:-1]

        def all_stopped() -> bool:
            with store.engine.connect() as conn:
                states = dict(conn.execute(sa.select(jobs.c.id, jobs.c.state)).all())
            return all(states[j] == "stopped" for j in stopping)

        wait_for(all_stopped, 60, "every decided stop to be delivered")
        timings["stops"] = time.monotonic() - t0 - timings["start"] - timings["load"]
    finally:
        http.close()
        for r in replicas:
            r.stop()
        hook.shutdown()
        hook.server_close()
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(scores.c.job_id, scores.c.step, scores.c.value)).all()
        stored = {(j, s): v for j, s, v in rows}
        per_job = defaultdict(int, conn.execute(sa.select(decisions.c.job_id, sa.func.count())
                                                .group_by(decisions.c.job_id)).all())
    store.dispose()
    lost = [k for k, v in acked.items() if stored.get(k) != v]
    keys: dict[tuple[str, str], set[str]] = defaultdict(set)
    for ref, action, key in state["log"]:
        keys[(ref, action)].add(key)
    print(f"\nacknowledged scores: {len(acked)}, lost: {len(lost)}; decisions per stopped job: "
          f"{sorted(per_job[j] for j in stopping)}; webhook requests: {len(state['log'])}; "
          f"keys per (job, action): max {max(len(v) for v in keys.values())}; seconds: "
          f"{ {k: round(v, 1) for k, v in timings.items()} }")
    assert not errors, errors[:3]
    assert len(acked) == N_JOBS * N_STEPS and lost == []
    assert all(per_job[j] == 1 for j in stopping) and per_job[job_ids[-1]] == 0
    for i in range(N_JOBS - 1):
        assert len(keys[(f"w{i}", "signal")]) == 1, keys
    assert all(len(v) == 1 for v in keys.values())
