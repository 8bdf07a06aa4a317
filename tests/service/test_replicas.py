"""Several replicas on one PostgreSQL: one leader for the pollers, single decisions under
concurrent ingest of one job, outbox rows claimed without waiting (SKIP LOCKED)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from evalstop.service import domain
from evalstop.service.ingest import ScoreIn
from evalstop.service.leader import Leadership
from evalstop.service.store import Store, metadata, open_store, outbox
from evalstop.service.targets import AdapterRegistry
from evalstop.service.worker import Worker

from ._support import RECORDING_PLUGIN, wait_for


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
            results[i].append(domain.ingest_scores(pg[i], job_id, "acme", [ScoreIn(step, value)]).decided_now)

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
