"""How write units reach their transaction: group commit for SQLite (:class:`GroupCommitter`),
and a few writer threads for PostgreSQL (:class:`WriterThreads`).

With ``synchronous=FULL`` every SQLite commit waits for an fsync, and SQLite has one writer at
a time, so one commit per request caps single-score ingest at 1/fsync-time. The committer runs
the units that queued up while the previous commit was on disk in ONE transaction, each in its
own SAVEPOINT: a unit that raises is rolled back alone (its caller gets the exception), the
others commit together, and nobody is answered before the commit is on disk. PostgreSQL
groups commits itself; there each unit gets its own transaction, on one of a few threads that
answer an event loop once per batch of finished units.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

from .. import phases

T = TypeVar("T")
#: A unit and who waits for it: a thread (a ``concurrent.futures.Future``) or a task on an
#: event loop (:class:`LoopWaiter`).
Unit = tuple[Callable[[Connection], Any], "Future[Any] | LoopWaiter"]
Outcome = tuple["Future[Any] | LoopWaiter", Any, "BaseException | None"]
#: A write unit, and what came of one: its result, or its exception.
AnyUnit = Callable[[Connection], Any]
Answer = tuple[Any, "BaseException | None"]
#: An asyncio future and what to settle it with (a result, or an error).
Settled = tuple["asyncio.Future[Any]", Any, "BaseException | None"]


class LoopWaiter:
    """A unit's asyncio future and its loop. The committer answers every waiter of one loop in a
    group with ONE call into that loop (one wake-up of the loop per group, not per unit; the
    ``wrap_future`` of a thread future cost a wake-up and two futures' bookkeeping per unit)."""

    __slots__ = ("future", "loop", "trace")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()
        #: the request's phase stamps (:mod:`..phases`), when the benchmark's log is on
        self.trace = phases.current()
        if self.trace is not None:
            self.trace.mark("admit")
            self.future.add_done_callback(_handed_back(self.trace))


class GroupCommitter:
    def __init__(self, begin: Callable[[], Any], max_group: int = 256) -> None:
        self._begin = begin  # () -> context manager yielding a Connection in a write transaction
        self.max_group = max_group
        self._queue: queue.Queue[Unit | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, unit: Callable[[Connection], T]) -> T:
        """Run ``unit(conn)`` in the next group; return its result once the group is committed."""
        return self.submit(unit).result()

    def submit(self, unit: Callable[[Connection], T]) -> Future[T]:
        """Queue ``unit`` for the next group; the future resolves once the group is committed.
        A future cancelled before its group starts is skipped (its unit never runs)."""
        self._ensure_thread()
        future: Future[T] = Future()
        self._queue.put((unit, future))
        return future

    def submit_async(self, unit: Callable[[Connection], T]) -> asyncio.Future[T]:
        """:meth:`submit` for a task on the running event loop: await the returned future. A
        future cancelled before its group starts is skipped too."""
        self._ensure_thread()
        waiter = LoopWaiter(asyncio.get_running_loop())
        self._queue.put((unit, waiter))
        return waiter.future

    def close(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join(10)
                self._thread = None

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="evalstop-commit", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < self.max_group:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this group
                    break
                group.append(item)
            self._commit(group)

    def _commit(self, group: list[Unit]) -> None:
        group = [(unit, waiter) for unit, waiter in group if _start(waiter)]
        if not group:
            return
        outcomes: list[Outcome] = []
        try:
            with self._begin() as conn:
                # SAVEPOINTs straight on the driver connection: SQLAlchemy's begin_nested() cost
                # more CPU than the unit's own statements (profile), and nothing here needs its
                # bookkeeping. Savepoint names nest, so a unit may use its own savepoints.
                raw = conn.connection.driver_connection
                assert raw is not None
                for unit, future in group:
                    raw.execute("SAVEPOINT evalstop_unit")
                    try:
                        result = unit(conn)
                    except Exception as exc:
                        raw.execute("ROLLBACK TO evalstop_unit")
                        raw.execute("RELEASE evalstop_unit")
                        outcomes.append((future, None, exc))
                    else:
                        raw.execute("RELEASE evalstop_unit")
                        outcomes.append((future, result, None))
        except Exception as exc:  # the commit itself failed: nobody's write is durable
            _answer([(waiter, None, exc) for _, waiter in group])
            return
        _answer(outcomes)


class RunAlone(Exception):
    """A group's outcome for a unit that must run again alone, after the group is answered (its
    job was held by another transaction: :meth:`~.dialect.Postgres.run_group`)."""


class WriterThreads:
    """Units run by ``threads`` threads of their own for tasks on an event loop (PostgreSQL).
    Each thread keeps one connection open (``connect()``) and runs its units on it, replacing it
    when it is closed, invalidated or ``stale(conn)``. A thread takes every unit queued when it
    gets to the queue (up to ``max_group``): one alone runs in its own transaction
    (``run(conn, unit)``), several run in one (``group(conn, units)``, a result or an exception
    each), so a burst costs fewer commits and messages per unit instead of more. What
    ``asyncio.to_thread`` and a pool checkout per unit cost, by profile (the 2026-12-02
    journal in bench/results/): the executor's future, its wrapping in an asyncio future, one wake-up of
    the loop per unit, and the pool's checkout and checkin (a tenth of a single score's CPU).
    Here a unit is queued with its :class:`LoopWaiter`, and the units that finish while the loop
    has not yet taken the last answers are answered together, in one call into the loop."""

    def __init__(
        self, connect: Callable[[], Connection],
        run: Callable[[Connection, AnyUnit], Any], stale: Callable[[Connection], bool], threads: int = 4,
        group: Callable[[Connection, list[AnyUnit]], list[Answer]] | None = None, max_group: int = 64,
    ) -> None:
        self._connect, self._runner, self._stale, self._group = connect, run, stale, group
        self.threads, self.max_group = threads, max_group
        self._queue: queue.SimpleQueue[Unit | None] = queue.SimpleQueue()
        self._running: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: per loop, the answers not yet taken by it (a call into the loop is pending for each)
        self._answers: dict[asyncio.AbstractEventLoop, list[Settled]] = {}

    def submit_async(self, unit: Callable[[Connection], T]) -> asyncio.Future[T]:
        """Queue ``unit``; await the returned future for its result once committed. A future
        cancelled before a thread takes its unit is skipped (the unit never runs)."""
        if not self._running:
            self._start_threads()
        waiter = LoopWaiter(asyncio.get_running_loop())
        self._queue.put((unit, waiter))
        return waiter.future

    def close(self) -> None:
        with self._lock:
            running, self._running = self._running, []
        for _ in running:
            self._queue.put(None)
        deadline = time.monotonic() + 10  # all threads together, not 10 s each
        for thread in running:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _start_threads(self) -> None:
        with self._lock:
            while len(self._running) < self.threads:
                thread = threading.Thread(target=self._run, name="evalstop-writer", daemon=True)
                thread.start()
                self._running.append(thread)

    def _run(self) -> None:
        conn: Connection | None = None
        last = False
        try:
            while not last and (item := self._queue.get()) is not None:
                batch = [item]
                while len(batch) < self.max_group:  # what else is queued: one group
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:  # this thread's stop: after this batch
                        last = True
                        break
                    batch.append(more)
                units = [(unit, waiter) for unit, waiter in batch if _start(waiter)]
                if units:
                    conn = self._answer(conn, units)
        finally:
            if conn is not None:
                conn.close()

    def _answer(self, conn: Connection | None, units: list[Unit]) -> Connection | None:
        """Run ``units`` (alone, or as one group) and queue their answers for their loops."""
        outcomes: list[Answer]
        _stamp(units, "hand_off")
        try:
            conn = self._fresh(conn)
            if len(units) > 1 and self._group is not None:
                outcomes = self._group(conn, [unit for unit, _ in units])
            else:
                outcomes = [self._alone(conn, unit) for unit, _ in units]
        except BaseException as exc:  # no connection, or the group itself failed
            outcomes = [(None, exc) for _ in units]
        _stamp(units, "database")
        answered = list(zip(units, outcomes, strict=True))
        again = [unit for unit, (_, error) in answered if isinstance(error, RunAlone)]
        self._settle_later([(unit, (result, error)) for unit, (result, error) in answered
                            if not isinstance(error, RunAlone)])
        if again and conn is not None:
            self._settle_later([(unit, self._alone(conn, unit[0])) for unit in again])
        return conn

    def _alone(self, conn: Connection, unit: AnyUnit) -> Answer:
        try:
            return self._runner(conn, unit), None
        except BaseException as exc:  # any: a thread that died here would leave its waiters hanging
            return None, exc

    def _settle_later(self, answered: list[tuple[Unit, Answer]]) -> None:
        """Queue each answer for its loop; one call into a loop takes all its queued answers."""
        for (_, waiter), (result, error) in answered:
            assert isinstance(waiter, LoopWaiter)
            with self._lock:
                pending = self._answers.setdefault(waiter.loop, [])
                pending.append((waiter.future, result, error))
                first = len(pending) == 1
            if first:  # else the call already pending takes this answer too
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                    waiter.loop.call_soon_threadsafe(self._settle, waiter.loop)

    def _fresh(self, conn: Connection | None) -> Connection:
        """``conn`` if it is still good, else a new connection (the old one discarded)."""
        if conn is not None and not conn.closed and not conn.invalidated and not self._stale(conn):
            return conn
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.invalidate()  # the pool opens a new one rather than reuse this
                conn.close()
        return self._connect()

    def _settle(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            settled = self._answers.pop(loop, [])
        _settle(settled)


def _handed_back(trace: phases.Trace) -> Callable[[asyncio.Future[Any]], None]:
    return lambda _future: trace.mark("hand_back")  # on the loop, just before the task resumes


def _stamp(units: list[Unit], name: str) -> None:
    if phases.RECORDER is not None:
        for _, waiter in units:
            if isinstance(waiter, LoopWaiter) and waiter.trace is not None:
                waiter.trace.mark(name)
                waiter.trace.notes["group"] = len(units)


def _start(waiter: Future[Any] | LoopWaiter) -> bool:
    """Whether the unit still runs: False for a waiter cancelled before its group started."""
    if isinstance(waiter, LoopWaiter):
        return not waiter.future.cancelled()  # a flag read across threads: at worst one stale run
    return waiter.set_running_or_notify_cancel()


def _answer(outcomes: list[Outcome]) -> None:
    """Settle every waiter: thread futures here, each loop's futures in one call into it."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Settled]] = {}
    for waiter, result, error in outcomes:
        if isinstance(waiter, LoopWaiter):
            by_loop.setdefault(waiter.loop, []).append((waiter.future, result, error))
        else:
            _resolve(waiter, result, error)
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[Settled]) -> None:
    for future, result, error in settled:
        _resolve(future, result, error)


def _resolve(future: Future[Any] | asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Set the outcome, unless the future is done already (cancelled by its task meanwhile)."""
    if future.done():
        return
    if isinstance(error, StopIteration) or (error is not None and not isinstance(error, Exception)):
        # a future refuses StopIteration, and a SystemExit or KeyboardInterrupt from a worker
        # thread would stop the awaiting task's whole event loop: the caller gets an error
        error = RuntimeError(f"a write unit raised {error!r}")
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
