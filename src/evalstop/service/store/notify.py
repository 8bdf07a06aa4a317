"""Changes pushed between replicas: PostgreSQL ``LISTEN``/``NOTIFY`` on a connection of its own.

A writer calls :meth:`.dialect.Dialect.notify` in its transaction (delivered when it commits; not
at all if it rolls back); every replica holds a :class:`Listening` connection and reads what
arrives. SQLite has one process and no channel: :func:`can_listen` is False there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from .engine import Store

#: A tenant's token was rotated or revoked, or its scope, quota or settings changed; the payload
#: is the tenant's name.
TENANTS = "evalstop_tenants"
#: How a listening connection names itself to the server (``pg_stat_activity``).
APPLICATION_NAME = "evalstop-listen"
#: What a lost or refused listening connection raises.
ListenError = (psycopg.Error, OSError)

# The server sees a dead peer within about 10 s (keepalives) and a stuck send within 5 s.
_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 2,
              "tcp_user_timeout": 5000}


def can_listen(store: Store) -> bool:
    return store.shared


class Listening:
    """One autocommit connection that listens on ``channel`` (open it with ``with``)."""

    def __init__(self, store: Store, channel: str) -> None:
        self.store, self.channel = store, channel
        self._conn: psycopg.Connection[Any] | None = None

    def __enter__(self) -> Listening:
        engine = self.store.engine
        args, params = engine.dialect.create_connect_args(engine.url)
        conn = psycopg.connect(*args, **{**params, **_KEEPALIVE, "autocommit": True,
                                         "client_encoding": "utf8", "connect_timeout": 5,
                                         "application_name": APPLICATION_NAME})
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        self._conn = conn
        return self

    def __exit__(self, *_: Any) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def messages(self, timeout_s: float) -> Iterator[str]:
        """The payloads that arrive within ``timeout_s``."""
        assert self._conn is not None
        for note in self._conn.notifies(timeout=timeout_s):
            yield note.payload

    def ping(self) -> None:
        """A round trip: raises if the connection is gone."""
        assert self._conn is not None
        self._conn.execute("SELECT 1")
