"""Several replicas on one PostgreSQL: one leader for the pollers, single decisions under
concurrent ingest of one job, outbox rows claimed without waiting (SKIP LOCKED), one rate
limit per tenant across replicas."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from evalstop.service import domain
from evalstop.service.app import create_app
from evalstop.service.fairness import Limits as FairLimits
from evalstop.service.fairness import RateLimited, SharedTokenBuckets
from evalstop.service.ingest import ScoreIn
from evalstop.service.leader import Leadership
from evalstop.service.store import Store, metadata, open_store, outbox
from evalstop.service.targets import AdapterRegistry
from evalstop.service.worker import Worker

from ._support import RECORDING_PLUGIN, Api, make_settings, wait_for


@pytest.fixture
def pg(postgres_url: str) -> Iterator[list[Store]]:
    stores = [open_store(postgres_url) for _ in range(2)]
    yield stores
    for s in stores:
        s.dispose()
    cleanup = open_store(postgres_url)
    metadata.drop_all(cleanup.engine)
    cleanup.dispose()


def test_one_leader_and_a_successor_when_it_goes(pg: list[Store]) -> None:
    a, b = Leadership(pg[0]), Leadership(pg[1])
    assert a.held() and not b.held() and a.held()
    a.release()  # the leader's session ends (as on SIGKILL: the server drops its connection)
    wait_for(b.held, 10, "the second replica to take the lead")  # the server frees it as the session exits
    assert not a.held()
    b.release()


def test_two_replicas_ingesting_one_job_decide_once(pg: list[Store]) -> None:
    domain.create_tenant(pg[0], "acme")
    spec = domain.JobSpec(external_ref="r1", target="recording", detector="evalstop:k=2", grace_period_s=0)
    job_id = domain.register_job(pg[0], "acme", spec)["id"]
    curve = [0.5, 0.6, 0.7, 0.65, 0.6, 0.55, 0.5, 0.45]
    results: list[list[bool]] = [[], []]
    barrier = threading.Barrier(2)

    def replica(i: int) -> None:
        barrier.wait()
        for step, value in enumerate(curve):  # both send every score: duplicates are no-ops
            result = domain.ingest_scores(pg[i], job_id, "acme", [ScoreIn(step=step, value=value)])
            results[i].append(result.decided_now)

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results[0]) + sum(results[1]) == 1
    assert len(domain.list_decisions(pg[0], job_id, None)) == 1


def test_replicas_claim_different_outbox_rows_without_waiting(pg: list[Store]) -> None:
    domain.create_tenant(pg[0], "acme")
    for i in range(2):
        spec = domain.JobSpec(external_ref=f"r{i}", target="recording", grace_period_s=0)
        job_id = domain.register_job(pg[0], "acme", spec)["id"]
        domain.set_override(pg[0], job_id, "acme", "stop_now")
    worker = Worker(pg[1], AdapterRegistry(RECORDING_PLUGIN))
    got: list[tuple[int, int] | None] = []
    with pg[0].transaction() as conn:  # another replica is in the middle of claiming the first row
        locked = conn.execute(sa.select(outbox.c.id).order_by(outbox.c.next_attempt_at, outbox.c.id)
                              .limit(1).with_for_update()).scalar_one()
        thread = threading.Thread(target=lambda: got.append(worker._claim()))
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "the claim waited for the other replica's row lock"
    assert got[0] is not None and got[0][0] != locked


def test_replicas_draw_on_one_bucket_per_tenant(pg: list[Store]) -> None:
    """A tenant's rate holds across replicas: tokens leave the shared bucket before a replica
    spends them, so two replicas together admit at most burst + rate x elapsed."""
    domain.create_tenant(pg[0], "acme")
    limits = FairLimits(scores_per_s=50.0, burst=20, max_live_jobs=10)
    buckets = [SharedTokenBuckets(s) for s in pg]
    buckets[0].take("acme", 15, limits)
    with pytest.raises(RateLimited) as refused:  # in-memory buckets would admit this too
        buckets[1].take("acme", 15, limits)
    assert 0 < refused.value.retry_after_s < 1.0
    with pytest.raises(RateLimited):  # and the refused replica answers the next flood from memory
        buckets[1].check_not_empty("acme", limits)
    admitted = [0, 0]
    started = time.monotonic()

    def replica(i: int) -> None:
        while time.monotonic() - started < 1.0:
            try:
                buckets[i].take("acme", 1, limits)
                admitted[i] += 1
            except RateLimited:
                time.sleep(0.002)

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    # at most what the bucket held (<= 5 + refill) plus the refill; both replicas got some
    assert sum(admitted) <= 5 + 50.0 * (elapsed + 0.1) + 1, admitted
    assert sum(admitted) >= 25 and min(admitted) > 0, admitted


def test_the_service_on_postgresql_limits_a_tenant_across_replicas(postgres_url: str) -> None:
    with TestClient(create_app(make_settings(postgres_url))) as a, \
            TestClient(create_app(make_settings(postgres_url))) as b:
        api = Api(a)
        token = api.tenant("acme", quota={"scores_per_s": 1, "burst": 20})
        job = api.job(token)
        batch = {"scores": [{"step": i, "value": 0.5} for i in range(15)]}
        assert api.post(token, job["id"], batch).status_code == 200
        r = Api(b).post(token, job["id"], {"scores": [{"step": 15 + i, "value": 0.5} for i in range(15)]})
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 5, r.text
    cleanup = open_store(postgres_url)
    metadata.drop_all(cleanup.engine)
    cleanup.dispose()
