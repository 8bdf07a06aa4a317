"""The console sessions aggregate: server-side sessions (the cookie names one by a random id;
a row holds its sha256) and the random secrets every replica shares."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from .engine import Store
from .tables import console_sessions, service_secrets, token_events


def shared_secret(store: Store, name: str) -> str:
    """The secret called ``name``: 32 random bytes (hex), made by the first replica that asks and
    read by every other (an insert that loses the race is ignored; everyone reads the winner's)."""
    with store.transaction() as conn:
        query = sa.select(service_secrets.c.value).where(service_secrets.c.name == name)
        found = conn.execute(query).scalar()
        if found is None:
            insert = store.dialect.insert_ignore(service_secrets)
            conn.execute(insert.values(name=name, value=secrets.token_hex(32), created_at=store.clock()))
            found = conn.execute(query).scalar_one()
    return str(found)


def create(store: Store, values: Mapping[str, Any]) -> None:
    """Add a session; sessions that expired are deleted on the way (a sign-in is rare)."""
    with store.transaction() as conn:
        conn.execute(console_sessions.delete().where(console_sessions.c.expires_at < values["created_at"]))
        conn.execute(console_sessions.insert().values(**values))


def live(store: Store, id_hash: str, now: float) -> dict[str, Any] | None:
    """The session with this id hash if it is neither revoked nor expired at ``now``."""
    query = sa.select(console_sessions).where(
        console_sessions.c.id_hash == id_hash, console_sessions.c.revoked_at.is_(None),
        console_sessions.c.expires_at > now)
    with store.reading() as conn:
        found = conn.execute(query).mappings().first()
    return None if found is None else dict(found)


def revoke(store: Store, id_hash: str, now: float, event: Mapping[str, Any] | None = None) -> bool:
    """End one session (sign-out); its cookie, wherever it was copied, is refused from now on.
    ``event`` (a ``token_events`` row without its time) is recorded in the same transaction if
    this call ended the session. True if it did (False: it had ended already)."""
    with store.transaction() as conn:
        done = conn.execute(console_sessions.update()
                            .where(console_sessions.c.id_hash == id_hash,
                                   console_sessions.c.revoked_at.is_(None))
                            .values(revoked_at=now))
        ended = done.rowcount == 1
        if ended and event is not None:
            conn.execute(token_events.insert().values(created_at=now, **event))
    return ended


def sweep(store: Store, now: float, batch: int) -> int:
    """Delete at most ``batch`` sessions that are revoked or expired at ``now`` (they are refused
    anyway; the rows only take space); return how many. Run by the outbox worker when idle."""
    dead = sa.or_(console_sessions.c.revoked_at.is_not(None), console_sessions.c.expires_at <= now)
    picked = sa.select(console_sessions.c.id_hash).where(dead).limit(batch)
    with store.transaction() as conn:
        ids = list(conn.execute(picked).scalars())
        if ids:
            conn.execute(console_sessions.delete().where(console_sessions.c.id_hash.in_(ids), dead))
    return len(ids)
