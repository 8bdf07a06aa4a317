"""Two helpers for the token and policy caches (:mod:`.context`): one database read in flight
per key, and reads done ahead of an entry's expiry on a thread of their own."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
log = logging.getLogger("evalstop.service.flight")


class _Call(Generic[V]):
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: V | None = None
        self.error: BaseException | None = None


class SingleFlight(Generic[V]):
    """``do(key, read)`` runs ``read()`` unless a call for ``key`` is already running; then it
    waits for that one and returns (or raises) what it did. A new tenant's first concurrent
    requests on a replica make one lookup, not one each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Hashable, _Call[V]] = {}

    def do(self, key: Hashable, read: Callable[[], V]) -> tuple[V, bool]:
        """``read()``'s result, and whether it was another caller's (shared)."""
        with self._lock:
            call = self._calls.get(key)
            leader = call is None
            if call is None:
                call = self._calls[key] = _Call()
        if not leader:
            call.done.wait()
            if call.error is not None:
                raise call.error
            return call.result, True  # type: ignore[return-value]
        try:
            call.result = read()
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            with self._lock:
                del self._calls[key]
            call.done.set()
        return call.result, False


class Refresher:
    """Runs ``refresh()`` calls on one daemon thread (started on first use), at most one queued
    per key: a busy entry asks on every request in its last moments, and is read once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._pending: set[Hashable] = set()
        self._queue: queue.SimpleQueue[tuple[Hashable, Callable[[], object]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def ahead(self, key: Hashable, refresh: Callable[[], object]) -> None:
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self._queue.put((key, refresh))

    def _run(self) -> None:
        while True:
            key, refresh = self._queue.get()
            try:
                refresh()
            except Exception as exc:  # the entry then expires as it would have; a request reads it
                log.debug("%s: refresh failed (%s)", self.name, type(exc).__name__)
            finally:
                with self._lock:
                    self._pending.discard(key)
