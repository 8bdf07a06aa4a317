"""A session lock held on a connection of its own, for work that one replica must do at a time
(:mod:`evalstop.service.leader`): a PostgreSQL advisory lock, released when the connection closes
(so a SIGKILLed holder loses it as soon as the server notices); on SQLite, the only process holds
it always."""

from __future__ import annotations

import contextlib
import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .engine import Store

log = logging.getLogger("evalstop.service.leader")


class SessionLock:
    def __init__(self, store: Store, key: int) -> None:
        self.store, self.key = store, key
        self._conn: Connection | None = None

    def held(self) -> bool:
        """True if this process holds the lock now (trying to take it if it does not)."""
        if not self.store.shared:
            return True
        if self._conn is not None:
            try:
                self._conn.execute(sa.text("SELECT 1"))
                return True
            except sa.exc.DBAPIError:
                log.warning("leader: lost the database connection; stepping down")
                self.release()
        return self._try()

    def _try(self) -> bool:
        conn = self.store.engine.connect()
        try:
            got = self.store.dialect.try_session_lock(conn, self.key)
            conn.commit()
        except sa.exc.DBAPIError:
            conn.close()
            return False
        if not got:
            conn.close()
            return False
        self._conn = conn
        log.info("leader: this replica now runs the pull pollers")
        return True

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                conn.invalidate()  # drop the session (and its lock) instead of returning it to the pool
            conn.close()
