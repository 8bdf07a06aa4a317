"""The tenants aggregate: create, read, change; look a token's hash up; rotate and revoke a
tenant's token (with its audit row and the end of its console sessions, in one transaction)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import Conflict, NotFound
from .dialect import Dialect
from .engine import Store
from .notify import TENANTS
from .tables import console_sessions, tenants, token_events


def create(store: Store, values: Mapping[str, Any]) -> None:
    with store.transaction() as conn:
        if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == values["name"])).first():
            raise Conflict(f"Tenant {values['name']!r} already exists.")
        conn.execute(tenants.insert().values(**values))


def update(store: Store, name: str, **values: Any) -> None:
    """Change tenant ``name``'s row; every replica hears of it when it commits (:mod:`.notify`)."""
    with store.transaction() as conn:
        done = conn.execute(tenants.update().where(tenants.c.name == name).values(**values))
        if done.rowcount == 0:
            raise NotFound(f"Tenant {name!r} not found.")
        store.dialect.notify(conn, TENANTS, name)


def policy(store: Store, name: str) -> tuple[Any, Any]:
    """``(scope, quota)`` of a tenant as stored."""
    with store.reading() as conn:
        query = sa.select(tenants.c.scope, tenants.c.quota).where(tenants.c.name == name)
        found = conn.execute(query).first()
    if found is None:
        raise NotFound(f"Tenant {name!r} not found.")
    return found.scope, found.quota


def for_token_hash(store: Store, digest: str, now: float, *, grace: bool = True) -> str | None:
    """The tenant whose token has this sha256, or None (see :func:`token_owner`)."""
    found = token_owner(store, digest, now, grace=grace)
    return None if found is None else found[0]


def token_owner(
    store: Store, digest: str, now: float, *, grace: bool = True
) -> tuple[str, float | None] | None:
    """``(tenant, valid_until)`` of the token with this sha256 (``valid_until`` None: no end), or
    None (compared in constant time). A revoked token is no one's; a token replaced by a rotation
    is still its tenant's until the end of the rotation's grace (``grace``; the console does not
    accept it at sign-in)."""
    valid = sa.and_(tenants.c.token_hash == digest, tenants.c.token_revoked_at.is_(None))
    if grace:
        valid = sa.or_(valid, sa.and_(tenants.c.previous_token_hash == digest,
                                      tenants.c.previous_valid_until > now))
    with store.reading() as conn:
        found = conn.execute(sa.select(tenants.c.name, tenants.c.token_hash, tenants.c.previous_token_hash,
                                       tenants.c.previous_valid_until).where(valid)).first()
    if found is None:
        return None
    current = found.token_hash == digest
    stored = found.token_hash if current else (found.previous_token_hash or "")
    if not hmac.compare_digest(stored.encode(), digest.encode()):
        return None
    return str(found.name), None if current else float(found.previous_valid_until)


def rotate_token(
    store: Store, name: str, digest: str, grace_s: float, event: Mapping[str, Any]
) -> float | None:
    """Give the tenant the token with sha256 ``digest``; the replaced one stays valid ``grace_s``
    seconds unless it was revoked (read and replaced in one statement, so two rotations at once
    cannot both keep a grace for the same token). Returns until when it stays valid, or None."""
    now = store.clock()
    live = tenants.c.token_revoked_at.is_(None)
    keep = grace_s > 0
    values = {"token_hash": digest, "token_revoked_at": None,
              "previous_token_hash": sa.case((live, tenants.c.token_hash), else_=None) if keep else None,
              "previous_valid_until": sa.case((live, now + grace_s), else_=None) if keep else None}
    with store.transaction() as conn:
        kept = conn.execute(sa.select(live).where(tenants.c.name == name)).scalar()
        grace = grace_s if keep and kept else 0.0
        _change_token(conn, store.dialect, name, now, values, {**event, "grace_s": grace})
    return now + grace_s if keep and kept else None


def revoke_token(store: Store, name: str, event: Mapping[str, Any]) -> float:
    """Make the tenant's token, and any still in a rotation's grace, no one's. Returns when."""
    now = store.clock()
    values = {"token_revoked_at": now, "previous_token_hash": None, "previous_valid_until": None}
    with store.transaction() as conn:
        _change_token(conn, store.dialect, name, now, values, {**event, "grace_s": 0.0})
    return float(now)


def _change_token(conn: Connection, dialect: Dialect, name: str, now: float, values: Mapping[str, Any],
                  event: Mapping[str, Any]) -> None:
    """Set the token columns, record ``event`` and end the tenant's console sessions (in the
    caller's transaction); every replica hears of it when it commits (:mod:`.notify`)."""
    done = conn.execute(tenants.update().where(tenants.c.name == name).values(**values))
    if done.rowcount == 0:
        raise NotFound(f"Tenant {name!r} not found.")
    dialect.notify(conn, TENANTS, name)
    conn.execute(token_events.insert().values(tenant=name, created_at=now, **event))
    conn.execute(console_sessions.update()
                 .where(console_sessions.c.tenant == name, console_sessions.c.revoked_at.is_(None))
                 .values(revoked_at=now))


def exists(store: Store, name: str) -> None:
    """NotFound unless tenant ``name`` exists."""
    with store.reading() as conn:
        if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == name)).first() is None:
            raise NotFound(f"Tenant {name!r} not found.")


def token_history(store: Store, name: str) -> list[dict[str, Any]]:
    """The tenant's token rotations and revocations, oldest first."""
    query = (sa.select(token_events.c.action, token_events.c.principal, token_events.c.actor,
                       token_events.c.reason, token_events.c.channel, token_events.c.grace_s,
                       token_events.c.created_at)
             .where(token_events.c.tenant == name).order_by(token_events.c.id))
    with store.reading() as conn:
        return [dict(r) for r in conn.execute(query).mappings().all()]


def list_all(store: Store) -> list[dict[str, Any]]:
    """Every tenant with its token's status (never a hash): ``token_revoked``/``token_revoked_at``,
    ``token_rotated_at`` (the last rotation, None if never) and ``token_grace_until`` (until when
    the token a rotation replaced stays valid, None when no grace is running)."""
    now = store.clock()
    rotated = (sa.select(sa.func.max(token_events.c.created_at))
               .where(token_events.c.tenant == tenants.c.name, token_events.c.action == "rotate")
               .scalar_subquery())
    with store.reading() as conn:
        rows = conn.execute(sa.select(tenants.c.name, tenants.c.shadow, tenants.c.created_at,
                                      tenants.c.scope, tenants.c.quota, tenants.c.token_revoked_at,
                                      rotated.label("token_rotated_at"), tenants.c.previous_valid_until)
                            .order_by(tenants.c.name)).mappings().all()
    out = []
    for r in rows:
        row = dict(r)
        until = row.pop("previous_valid_until")
        out.append({**row, "token_revoked": row["token_revoked_at"] is not None,
                    "token_grace_until": until if until is not None and until > now else None})
    return out
