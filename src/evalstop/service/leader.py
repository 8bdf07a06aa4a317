"""One leader among the replicas that share a database, for work that must run once (the pull
pollers): on PostgreSQL, the holder of a session advisory lock; on SQLite, the only process.

The lock lives on a connection of its own and is released when that connection closes, so a
replica that is SIGKILLed loses it as soon as the server notices the dead connection; another
replica takes it on its next try. A leader checks its connection each round and steps down
when it is gone.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .store import Store

log = logging.getLogger("evalstop.service.leader")
#: The advisory lock key of the pull pollers ("evalpull" as an int64).
PULL_LOCK = int.from_bytes(b"evalpull", "big") & 0x7FFF_FFFF_FFFF_FFFF


class Leadership:
    def __init__(self, store: Store, key: int = PULL_LOCK) -> None:
        self.store, self.key = store, key
        self._conn: Connection | None = None

    def held(self) -> bool:
        """True if this process leads now (trying to become leader if it does not)."""
        if self.store.is_sqlite:
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
            got = conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar()
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

    def __enter__(self) -> Leadership:
        return self

    def __exit__(self, *_: Any) -> None:
        self.release()
