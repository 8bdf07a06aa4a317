"""Group commit for SQLite: many concurrent write units, one durable commit.

With ``synchronous=FULL`` every SQLite commit waits for an fsync, and SQLite has one writer at
a time, so one commit per request caps single-score ingest at 1/fsync-time. The committer runs
the units that queued up while the previous commit was on disk in ONE transaction, each in its
own SAVEPOINT: a unit that raises is rolled back alone (its caller gets the exception), the
others commit together, and nobody is answered before the commit is on disk. PostgreSQL
groups commits itself; there each unit gets its own transaction.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

T = TypeVar("T")
Unit = tuple[Callable[[Connection], Any], "Future[Any]"]


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
        group = [(unit, future) for unit, future in group if future.set_running_or_notify_cancel()]
        if not group:
            return
        outcomes: list[tuple[Future[Any], Any, BaseException | None]] = []
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
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, result, error in outcomes:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
