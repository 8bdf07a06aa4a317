"""Every replica hears at once when a tenant's token or policy changes on any replica.

A rotation, a revocation or a change of a tenant's scope, quota or settings sends the tenant's
name on the ``evalstop_tenants`` channel in the transaction that makes it (PostgreSQL ``NOTIFY``,
delivered when that transaction commits). :class:`TenantWatch` listens on a connection of its own
and drops the tenant's cached tokens and policy the moment the name arrives, so the next request
with a revoked token goes to the database and is refused. When that connection is lost it
reconnects with a backoff (from 0.05 s, doubling, at most ``backoff_max_s``) and, once it
listens again, drops every cached entry (what changed meanwhile was not heard); while it is down
the caches' own time limits (``token_cache_s``, ``policy_cache_s``) bound how long a change
takes, as they did before. SQLite has one process: the route that changes a token forgets it
itself, and no watch runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .background import DaemonLoop
from .store import Store
from .store.notify import TENANTS, ListenError, Listening

log = logging.getLogger("evalstop.service.revocation")


class TenantWatch(DaemonLoop):
    """Calls ``changed(tenant)`` for each tenant named on the channel, and ``missed()`` each time
    it begins to listen (at start and after a reconnection)."""

    thread_name = "evalstop-tenant-watch"

    def __init__(self, store: Store, changed: Callable[[str], None], missed: Callable[[], None], *,
                 backoff_max_s: float = 5.0, ping_s: float = 5.0, wait_s: float = 0.25) -> None:
        self.store, self.changed, self.missed = store, changed, missed
        self.backoff_max_s, self.ping_s, self.wait_s = backoff_max_s, ping_s, wait_s
        self.listening = threading.Event()  # set while the channel is heard
        self.connects = 0  # how many times it began to listen (1 + reconnections)

    def _run(self, stop: threading.Event) -> None:
        delay = 0.05
        while not stop.is_set():
            try:
                with Listening(self.store, TENANTS) as channel:
                    self.missed()  # what changed while no one listened was not heard
                    self.connects += 1
                    self.listening.set()
                    log.info("tenant watch: listening for token and policy changes")
                    delay = 0.05
                    self._follow(channel, stop)
            except ListenError as exc:
                if self.listening.is_set() or self.connects == 0:
                    log.warning("tenant watch: not listening (%s); caches fall back to their time "
                                "limits; retrying", type(exc).__name__)
            self.listening.clear()
            stop.wait(delay)
            delay = min(delay * 2, self.backoff_max_s)

    def _follow(self, channel: Listening, stop: threading.Event) -> None:
        pinged = time.monotonic()
        while not stop.is_set():
            for tenant in channel.messages(self.wait_s):
                self.changed(tenant)
            if time.monotonic() - pinged >= self.ping_s:
                channel.ping()  # a dead connection raises here, not in silence
                pinged = time.monotonic()
