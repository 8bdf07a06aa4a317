"""Group commit for SQLite: many concurrent write units, one durable commit.

With ``synchronous=FULL`` every SQLite commit waits for an fsync, and SQLite has one writer at
a time, so one commit per request caps single-score ingest at 1/fsync-time. The committer runs
the units that queued up while the previous commit was on disk in ONE transaction, each in its
own SAVEPOINT: a unit that raises is rolled back alone (its caller gets the exception), the
others commit together, and nobody is answered before the commit is on disk. PostgreSQL
groups commits itself; there each unit gets its own transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

T = TypeVar("T")
#: A unit and who waits for it: a thread (a ``concurrent.futures.Future``) or a task on an
#: event loop (:class:`LoopWaiter`).
Unit = tuple[Callable[[Connection], Any], "Future[Any] | LoopWaiter"]
Outcome = tuple["Future[Any] | LoopWaiter", Any, "BaseException | None"]


class LoopWaiter:
    """A unit's asyncio future and its loop. The committer answers every waiter of one loop in a
    group with ONE call into that loop (one wake-up of the loop per group, not per unit; the
    ``wrap_future`` of a thread future cost a wake-up and two futures' bookkeeping per unit)."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()


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


def _start(waiter: Future[Any] | LoopWaiter) -> bool:
    """Whether the unit still runs: False for a waiter cancelled before its group started."""
    if isinstance(waiter, LoopWaiter):
        return not waiter.future.cancelled()  # a flag read across threads: at worst one stale run
    return waiter.set_running_or_notify_cancel()


def _answer(outcomes: list[Outcome]) -> None:
    """Settle every waiter: thread futures here, each loop's futures in one call into it."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]] = {}
    for waiter, result, error in outcomes:
        if isinstance(waiter, LoopWaiter):
            by_loop.setdefault(waiter.loop, []).append((waiter.future, result, error))
        else:
            _resolve(waiter, result, error)
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in settled:
        _resolve(future, result, error)


def _resolve(future: Future[Any] | asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Set the outcome, unless the future is done already (cancelled by its task meanwhile)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
