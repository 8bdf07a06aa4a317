"""The PostgreSQL store's ingest path: a pooled connection the server closed is replaced at
checkout (no pre-ping round trip per checkout), and the ingest statements read only the columns
they use."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from pydantic import ValidationError

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
        _drop_tables(postgres_url)


def _drop_tables(postgres_url: str) -> None:
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
    _, lock = pg_store.dialect._lock[True, False]  # type: ignore[attr-defined]
    assert lock.columns == (*INGEST_COLUMNS, "tenant_shadow")
    job = pg_store.write(lambda conn: pg_store.dialect.read_ingest_job(conn, job_id, "t"))
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


def _count_executes(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the statements sent to the server by kind: the ingest's one-message sends
    (``ClientCursor.execute``) and every other driver execute."""
    counts = {"client": 0, "other": 0}
    client_execute, execute = psycopg.ClientCursor.execute, psycopg.Cursor.execute

    def counted_client(self: psycopg.ClientCursor, *args: object, **kwargs: object) -> object:
        counts["client"] += 1
        return client_execute(self, *args, **kwargs)  # type: ignore[arg-type]

    def counted(self: psycopg.Cursor, *args: object, **kwargs: object) -> object:
        counts["other"] += 1
        return execute(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(psycopg.ClientCursor, "execute", counted_client)
    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return counts


def test_a_single_score_is_two_messages_to_the_server(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BEGIN, the lock and the state in one message; the write and COMMIT in a second
    (docs/service.md, "Round trips"): nothing else is sent for an ordinary single score."""
    job_id = _job(pg_store)
    domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=1, value=0.5)])  # statements prepared
    counts = _count_executes(monkeypatch)
    for step in range(2, 7):
        domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=step, value=0.5 + step / 100)])
    assert counts == {"client": 10, "other": 0}
    with pg_store.reading() as conn:  # the writes that went with COMMIT are stored
        rows = conn.execute(sa.text("SELECT step, value FROM scores WHERE job_id = :j ORDER BY step"),
                            {"j": job_id}).all()
    assert [tuple(r) for r in rows] == [(1, 0.5)] + [(s, 0.5 + s / 100) for s in range(2, 7)]


def test_a_rolled_back_ingest_keeps_the_prepared_statements(pg_store: Store) -> None:
    """A refused score rolls its transaction back; the connection's prepared statements survive
    it (psycopg's own preparing, which answers a rollback with DEALLOCATE ALL, is off), so the
    next ingest on the same connection succeeds."""
    job_id = _job(pg_store)
    for _ in range(6):  # what psycopg would have prepared by itself
        pg_store.write(lambda conn: conn.execute(sa.select(sa.literal(1))).scalar())
    domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=1, value=0.5)])
    with pytest.raises(domain.Conflict):
        domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=1, value=0.7)])
    pids = _pooled_pids(pg_store)
    result = domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=2, value=0.6)])
    assert result.accepted == 1 and _pooled_pids(pg_store) == pids


def test_a_held_back_write_that_fails_at_commit_writes_nothing(pg_store: Store) -> None:
    """The unit's write goes to the server with COMMIT; when the server refuses it there, the
    error is SQLAlchemy's (as from any statement), nothing of the unit is stored, and the
    connection is clean for the next unit."""
    job_id = _job(pg_store)
    domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=1, value=0.5)])
    row = (job_id, 2, 0.9, None, None, "score", None, None, None, 0, time.time())

    def bad_monitor(conn: sa.Connection) -> None:
        pg_store.dialect.read_ingest_job(conn, job_id, "t")
        pg_store.dialect.write_scores(conn, [row], job_id, "{not json")

    with pytest.raises(sa.exc.DataError):
        pg_store.write(bad_monitor)
    with pg_store.reading() as conn:
        steps = conn.execute(sa.text("SELECT step FROM scores WHERE job_id = :j"), {"j": job_id}).scalars()
        assert sorted(steps) == [1]
    assert domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=2, value=0.6)]).accepted == 1


@pytest.mark.parametrize("value", [
    "plain", "it's", "back\\slash\\", "%s %(x)s {}", "'); DROP TABLE scores; --",
    "ünïcode ☃ \U0001d518", "E'\\x27'",
    "", 0, -1, 10**12, 0.5, -0.0, 1e-300, 1.7976931348623157e308, 0.1 + 0.2, float("nan"), float("inf"),
    float("-inf"), True, False, None,
])
def test_a_rendered_value_reads_back_as_itself(pg_store: Store, value: object) -> None:
    """The ingest sends its values as SQL literals in the statement's text (one message per
    round trip): each must read back exactly, whatever a tenant put in it."""
    from evalstop.service.store.dialect import _Tx

    def read(conn: sa.Connection) -> object:
        raw = conn.connection.driver_connection
        with psycopg.ClientCursor(raw) as cur:
            cast = {float: "::float8", int: "::bigint"}.get(type(value), "")  # as the columns take them
            sql = _Tx(cur).render(f"SELECT (%s){cast}", [value])
            cur.execute(sql)
            return cur.fetchone()[0]  # type: ignore[index]

    got = pg_store.write(read)
    if isinstance(value, float) and value != value:
        assert isinstance(got, float) and got != got
    else:
        assert got == value and type(got) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, got) == math.copysign(1, value)  # -0.0 keeps its sign


def test_text_with_a_nul_is_refused_not_cut(pg_store: Store) -> None:
    """libpq's quoting would end the text at a NUL, so a job id like ``<id>%00x`` would name the
    job ``<id>``: the store refuses such text, and a score refuses it in its own fields."""
    from evalstop.service.store.dialect import _Tx

    job_id = _job(pg_store)
    with pytest.raises(domain.InvalidInput, match="NUL"):
        domain.ingest_scores(pg_store, job_id + "\x00x", "t", [ScoreIn(step=1, value=0.5)])
    with pytest.raises(ValidationError, match="NUL"):
        ScoreIn(step=1, value=0.5, checkpoint_uri="s3://a\x00evil")

    def render(conn: sa.Connection) -> str:
        with psycopg.ClientCursor(conn.connection.driver_connection) as cur:
            return _Tx(cur).render("SELECT %s", ["a\x00b"])

    with pytest.raises(domain.InvalidInput):
        pg_store.write(render)
    assert domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=1, value=0.5)]).accepted == 1


def test_a_connection_whose_prepare_failed_is_replaced(pg_store: Store, postgres_url: str) -> None:
    """If preparing the ingest's statements fails half-way (here a lock timeout while another
    session holds the scores table), the connection is dropped, not kept with half of them:
    the next ingest prepares them afresh on a new one."""
    job_id = _job(pg_store)
    impatient = open_store(postgres_url + "?options=-c%20lock_timeout%3D300", migrate=False)
    try:
        with pg_store.engine.connect() as holder:
            holder.execute(sa.text("LOCK TABLE scores IN ACCESS EXCLUSIVE MODE"))
            with pytest.raises(sa.exc.OperationalError):
                domain.ingest_scores(impatient, job_id, "t", [ScoreIn(step=1, value=0.5)])
            holder.rollback()
        assert domain.ingest_scores(impatient, job_id, "t", [ScoreIn(step=1, value=0.5)]).accepted == 1
    finally:
        impatient.dispose()


def test_writer_threads_replace_a_connection_the_server_closed(pg_store: Store) -> None:
    """A writer thread keeps its connection between units; when the server ends it (here
    ``pg_terminate_backend``), the next unit runs on a new one instead of failing."""
    import asyncio

    job_id = _job(pg_store)

    async def ingest(step: int) -> int:
        result = await domain.ingest_scores_async(pg_store, job_id, "t", [ScoreIn(step=step, value=0.5)])
        return result.accepted

    async def backend_pids() -> set[int]:
        def pid(conn: sa.Connection) -> int:
            return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
        return {await pg_store.write_async(pid) for _ in range(3 * pg_store.writers.threads)}

    async def scenario() -> None:
        assert await ingest(1) == 1
        before = await backend_pids()
        assert len(before) <= pg_store.writers.threads  # kept, not a new connection per unit
        with pg_store.reading() as conn:
            for pid in before:
                conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
        time.sleep(0.2)  # the server's goodbye reaches the idle sockets
        n = 2 * pg_store.writers.threads
        assert [await ingest(step) for step in range(2, 2 + n)] == [1] * n
        assert not (await backend_pids()) & before

    asyncio.run(scenario())


def test_db_threads_sets_the_writer_threads(postgres_url: str) -> None:
    store = open_store(postgres_url, db_threads=2)
    try:
        assert store.writers.threads == 2
    finally:
        store.dispose()


def test_queued_scores_commit_as_one_group(postgres_url: str) -> None:
    """Units queued while the writer thread is busy run as ONE transaction, each in a savepoint:
    a later unit sees an earlier one's score (a changed value for it is a Conflict, rolled back
    alone), and a job another transaction holds is not waited for inside the group but written
    alone after it, once the holder lets go."""
    import asyncio
    import threading

    store = open_store(postgres_url, db_threads=1)
    sizes: list[int] = []
    try:
        domain.create_tenant(store, "t")
        a, b = (str(domain.register_job(store, "t", domain.JobSpec(external_ref=ref, target="dryrun"))["id"])
                for ref in ("a", "b"))
        group = store.writers._group
        assert group is not None

        def counted(conn: sa.Connection, units: list) -> list:  # type: ignore[type-arg]
            sizes.append(len(units))
            return group(conn, units)

        store.writers._group = counted
        gate, started = threading.Event(), threading.Event()
        holder = store.engine.connect()
        holder.execute(sa.text("SELECT id FROM jobs WHERE id = :b FOR UPDATE"), {"b": b})  # b is held

        def hold(conn: sa.Connection) -> None:
            started.set()
            gate.wait(5)

        async def main() -> list[object]:
            first = asyncio.ensure_future(store.write_async(hold))
            await asyncio.to_thread(started.wait, 5)
            sends = [(a, 1, 0.5), (a, 2, 0.6), (a, 1, 0.9), (b, 1, 0.5)]
            ingest = domain.ingest_scores_async
            tasks = [asyncio.ensure_future(ingest(store, job, "t", [ScoreIn(step=s, value=v)]))
                     for job, s, v in sends]
            for i, task in enumerate(tasks):
                task.add_done_callback(lambda _, i=i: done.__setitem__(i, time.monotonic()))
            await asyncio.sleep(0.05)  # all four are queued behind ``hold``
            gate.set()
            threading.Timer(0.5, lambda: released.append(time.monotonic()) or holder.close()).start()
            return list(await asyncio.gather(first, *tasks, return_exceptions=True))

        done: dict[int, float] = {}
        released: list[float] = []
        answers = asyncio.run(main())
        assert sizes == [4]
        # the group did not wait for b's holder: a's answers came before it let go, b's after
        assert max(done[0], done[1], done[2]) < released[0] < done[3]
        assert [getattr(r, "accepted", None) for r in answers[1:3]] == [1, 1]
        assert isinstance(answers[3], domain.Conflict) and getattr(answers[4], "accepted", None) == 1
        with store.reading() as conn:
            rows = conn.execute(sa.text("SELECT job_id, step, value FROM scores ORDER BY job_id, step")).all()
        assert sorted((j == a, s, v) for j, s, v in rows) == [(False, 1, 0.5), (True, 1, 0.5), (True, 2, 0.6)]
    finally:
        store.dispose()
        _drop_tables(postgres_url)


def test_a_group_whose_carried_write_fails_fails_whole(pg_store: Store) -> None:
    """In a group, a unit's writes go with the next unit's first message. When the server
    refuses that message, which statement it refused is not known, so no unit of the group
    stands (the earlier unit's score would otherwise be answered but rolled back)."""
    first, second = _job(pg_store), str(domain.register_job(
        pg_store, "t", domain.JobSpec(external_ref="e2", target="dryrun"))["id"])
    row = (first, 1, 0.5, None, None, "score", None, None, None, 0, time.time())

    def bad_write(conn: sa.Connection) -> str:
        pg_store.dialect.read_ingest_job(conn, first, "t")
        pg_store.dialect.write_scores(conn, [row], first, "{not json")  # refused only when sent
        return "answered"

    def good(conn: sa.Connection) -> str:
        pg_store.dialect.read_ingest_job(conn, second, "t")
        return "answered"

    with pg_store.engine.connect() as conn:
        outcomes = pg_store.dialect.run_group(conn, [bad_write, good])
    assert [result for result, _ in outcomes] == [None, None]
    assert all(isinstance(error, sa.exc.DataError) for _, error in outcomes)
    with pg_store.reading() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM scores")).scalar_one() == 0


def test_a_connection_whose_prepared_statements_went_stale_is_replaced(pg_store: Store) -> None:
    """A migration that changes a column the prepared lock returns makes its cached plan fail
    ("cached plan must not change result type"): that ingest fails (the service answers 503),
    and the next one runs on a new connection that prepares the statements afresh."""
    job_id = _job(pg_store)
    domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=1, value=0.5)])  # prepared, kept in the pool
    with pg_store.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE jobs ALTER COLUMN metric TYPE varchar(300)"))
    with pytest.raises(sa.exc.DBAPIError, match="cached plan"):
        domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=2, value=0.5)])
    assert domain.ingest_scores(pg_store, job_id, "t", [ScoreIn(step=2, value=0.5)]).accepted == 1
