"""The PostgreSQL store's ingest path: a pooled connection the server closed is replaced at
checkout (no pre-ping round trip per checkout), and the ingest statements read only the columns
they use."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa

from evalstop.service import domain
from evalstop.service.score import ScoreIn
from evalstop.service.store import Store, metadata, open_store
from evalstop.service.store.statements import INGEST_COLUMNS, JOB_STATE


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[Store]:
    store = open_store(postgres_url)
    try:
        yield store
    finally:
        store.dispose()
        cleanup = open_store(postgres_url)
        metadata.drop_all(cleanup.engine)
        cleanup.dispose()


def _job(store: Store) -> str:
    domain.create_tenant(store, "t")
    spec = domain.JobSpec(external_ref="e1", target="dryrun", detector="evalstop:k=1000000")
    return str(domain.register_job(store, "t", spec)["id"])


def _pooled_pids(store: Store) -> set[int]:
    with store.reading() as conn:
        return {int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())}


def _terminate(url: str, pids: set[int]) -> None:
    with psycopg.connect(url.replace("postgresql+psycopg:", "postgresql:"), autocommit=True) as admin:
        for pid in pids:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        deadline = time.monotonic() + 10  # gone, as after a restart (the goodbye is on its socket)
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                            (list(pids),)).fetchone() != (0,):
            assert time.monotonic() < deadline, f"backends {pids} still there"
            time.sleep(0.01)


def test_a_connection_the_server_closed_is_replaced_at_checkout(pg_store: Store, postgres_url: str) -> None:
    job_id = _job(pg_store)
    domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=0, value=0.5)])
    before = _pooled_pids(pg_store)
    _terminate(postgres_url, before)  # as a database restart does to every pooled connection
    result = domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=1, value=0.5)])
    assert result.accepted == 1
    assert _pooled_pids(pg_store).isdisjoint(before)  # a new connection, not an error


def test_a_healthy_pooled_connection_is_not_pinged(pg_store: Store) -> None:
    job_id = _job(pg_store)
    domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=0, value=0.5)])
    pings: list[object] = []
    original = pg_store.engine.dialect.do_ping

    def counting(dbapi_conn: object) -> bool:
        pings.append(dbapi_conn)
        return original(dbapi_conn)

    pg_store.engine.dialect.do_ping = counting  # type: ignore[method-assign]
    for step in range(1, 6):
        domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=step, value=0.5)])
    assert pings == []


def test_ingest_reads_the_job_columns_it_uses(pg_store: Store) -> None:
    """The lock statement names its columns (each result column costs the driver per request),
    and they are the ones the SQLite read names too."""
    job_id = _job(pg_store)
    lock = pg_store.dialect._lock[True]  # type: ignore[attr-defined]
    assert lock.columns == (*INGEST_COLUMNS, "tenant_shadow")
    with pg_store.transaction() as conn:
        job = pg_store.dialect.read_ingest_job(conn, job_id, "t")
    assert job is not None
    assert set(job) == {*INGEST_COLUMNS, "tenant_shadow", "latest", "enforced", "shadow_stop",
                        "detector_decided"}
    assert job["id"] == job_id and job["latest"] is None and job["monitor_state"] is not None


def _scores_rows_read(plan: dict[str, object]) -> list[int]:
    """Actual rows of every plan node that reads the scores table."""
    found = []
    if plan.get("Relation Name") == "scores":
        found.append(int(plan["Actual Rows"]))  # type: ignore[call-overload]
    for child in plan.get("Plans", []):  # type: ignore[attr-defined]
        found += _scores_rows_read(child)
    return found


def test_the_ingest_state_read_does_not_grow_with_the_history(pg_store: Store) -> None:
    """The watched metric's latest step is one index entry, not a max() over every stored step
    (which PostgreSQL did with the metric given by a subquery: 0.8 ms at 5,000 evals, the history
    ratio of 1.4-1.5 in bench/service_load.py)."""
    job_id = _job(pg_store)
    domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=s, value=0.5) for s in range(300)])
    bound = JOB_STATE.params(job_id=job_id)
    sql = str(bound.compile(pg_store.engine, compile_kwargs={"literal_binds": True}))
    with pg_store.reading() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql.replace("%", "%%")).scalar_one()
    assert _scores_rows_read(plan[0]["Plan"]) == [1]
