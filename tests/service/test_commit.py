"""Group commit: units queued together commit together; a failing unit is rolled back alone."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from evalstop.service.store import Store, open_store, tenants
from evalstop.service.store.commit import GroupCommitter


def _unit(i: int, gate: threading.Event, started: threading.Event | None = None,
          ran: list[int] | None = None) -> Callable[[Connection], int]:
    """Unit ``i`` inserts tenant ``t{i}``; unit 0 holds its group open until ``gate`` (setting
    ``started`` first) so that the others queue up behind it; unit 3 refuses."""
    def run(conn: Connection) -> int:
        if ran is not None:
            ran.append(i)
        if i == 0:
            if started is not None:
                started.set()
            gate.wait(5)
        row = {"name": f"t{i}", "token_hash": f"h{i}", "shadow": False, "created_at": 0}
        conn.execute(tenants.insert().values(**row))
        if i == 3:
            raise ValueError("unit 3 refuses")
        return i
    return run


def test_a_failing_unit_is_rolled_back_alone_and_the_rest_commit(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    assert store.committer is not None
    gate = threading.Event()
    results: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            results[i] = store.write(_unit(i, gate))
        except ValueError as exc:
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    threads[0].start()
    for t in threads[1:]:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert isinstance(results.pop(3), ValueError)
    assert results == {i: i for i in range(8) if i != 3}
    with store.engine.connect() as conn:
        names = set(conn.execute(sa.select(tenants.c.name)).scalars())
    assert names == {f"t{i}" for i in range(8) if i != 3}
    store.dispose()


def test_a_failed_commit_fails_every_unit_of_the_group() -> None:
    class Boom:
        def __enter__(self) -> Connection:
            raise RuntimeError("disk full")

        def __exit__(self, *exc: object) -> None:
            return None

    committer = GroupCommitter(Boom)
    with pytest.raises(RuntimeError, match="disk full"):
        committer.run(lambda conn: 1)
    committer.close()


def test_a_database_that_stays_locked_fails_the_begin_as_sqlalchemy_would(tmp_path: Path) -> None:
    """``BEGIN IMMEDIATE`` runs on the driver connection (store/engine.py); a lock it cannot get
    is still SQLAlchemy's ``OperationalError`` (the service's 503), and nothing is left open."""
    store = open_store(f"sqlite:///{tmp_path / 'l.db'}")
    holder = sqlite3.connect(tmp_path / "l.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with store.engine.connect() as conn:
            conn.connection.driver_connection.execute("PRAGMA busy_timeout = 50")  # type: ignore[union-attr]
            conn.execution_options(evalstop_writes=True)
            with pytest.raises(sa.exc.OperationalError, match="database is locked"), conn.begin():
                pass
            assert not conn.in_transaction()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with store.transaction() as conn:  # and the lock, once free, is taken as before
        conn.execute(tenants.insert().values(name="t", token_hash="h", shadow=False, created_at=0))
    store.dispose()


def _answered_on_a_loop(store: Store, busy_s: float) -> tuple[list[object], int, list[int]]:
    """Units 0-5 awaited on an event loop: unit 0 holds its transaction until units 1-5 are
    queued, unit 5's task gives up before its unit starts, and the loop is then kept busy for
    ``busy_s``. Returns every task's answer, how many calls were made into the loop after unit
    0 started, and the units that ran."""
    gate, started = threading.Event(), threading.Event()
    ran: list[int] = []

    async def main() -> tuple[list[object], int]:
        loop = asyncio.get_running_loop()
        calls = 0
        real = loop.call_soon_threadsafe

        def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        first = asyncio.ensure_future(store.write_async(_unit(0, gate, started, ran)))
        await asyncio.to_thread(started.wait, 5)
        calls = 0  # the to_thread above called into the loop too
        rest = [asyncio.ensure_future(store.write_async(_unit(i, gate, started, ran))) for i in range(1, 6)]
        await asyncio.sleep(0)  # every unit is queued behind unit 0
        rest[4].cancel()  # unit 5: its task gives up before its unit starts
        gate.set()
        time.sleep(busy_s)  # the loop is busy meanwhile
        answers = await asyncio.gather(first, *rest, return_exceptions=True)
        return list(answers), calls

    answers, calls = asyncio.run(main())
    return answers, calls, ran


def _check_answers(store: Store, answers: list[object], ran: list[int]) -> None:
    """Each task got its own result or exception; unit 3's refusal rolled back unit 3 alone."""
    assert answers[:3] == [0, 1, 2] and answers[4] == 4
    assert isinstance(answers[3], ValueError) and isinstance(answers[5], asyncio.CancelledError)
    assert sorted(ran) == [0, 1, 2, 3, 4]
    with store.engine.connect() as conn:
        names = set(conn.execute(sa.select(tenants.c.name)).scalars())
    assert names == {"t0", "t1", "t2", "t4"}


def test_units_awaited_on_an_event_loop_are_answered_in_one_call_per_group(tmp_path: Path) -> None:
    """``Store.write_async`` on SQLite: a unit whose task gave up before its group started never
    runs, and the committer calls into the loop once per group: two groups (unit 0, then units
    1-4 queued behind it), two calls for five units."""
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}")
    assert store.committer is not None
    answers, calls, ran = _answered_on_a_loop(store, 0.0)
    _check_answers(store, answers, ran)
    assert calls == 2
    store.dispose()


def test_writer_threads_answer_units_that_finish_together_in_one_call(tmp_path: Path) -> None:
    """``Store.write_async`` without group commit (the PostgreSQL path; SQLite here, one writer
    thread): each unit in its own transaction, and the units that finish while the loop is busy
    are answered in one call into it."""
    store = open_store(f"sqlite:///{tmp_path / 'w.db'}", group_commit=False, db_threads=1)
    assert store.committer is None
    answers, calls, ran = _answered_on_a_loop(store, 1.0)
    _check_answers(store, answers, ran)
    assert calls == 1
    store.dispose()


def test_a_writer_thread_answers_a_unit_whatever_it_raises(tmp_path: Path) -> None:
    """A unit raising something a future refuses (StopIteration) or something that is not an
    ``Exception`` still gets an answer, and the writer thread goes on to the next unit."""
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}", group_commit=False, db_threads=1)

    def stops(conn: Connection) -> None:
        raise StopIteration

    def exits(conn: Connection) -> None:
        raise SystemExit(3)

    async def main() -> list[object]:
        tasks = [store.write_async(stops), store.write_async(exits), store.write_async(lambda conn: "next")]
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    answers = asyncio.run(asyncio.wait_for(main(), 10))
    assert isinstance(answers[0], RuntimeError) and "StopIteration" in str(answers[0])
    assert isinstance(answers[1], RuntimeError) and "SystemExit" in str(answers[1]) and answers[2] == "next"
    store.dispose()
