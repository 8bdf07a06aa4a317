"""The tenants aggregate: create, read, change; look a token's hash up."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from ..errors import Conflict, NotFound
from .engine import Store
from .tables import tenants


def create(store: Store, values: Mapping[str, Any]) -> None:
    with store.transaction() as conn:
        if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == values["name"])).first():
            raise Conflict(f"Tenant {values['name']!r} already exists.")
        conn.execute(tenants.insert().values(**values))


def update(store: Store, name: str, **values: Any) -> None:
    with store.transaction() as conn:
        done = conn.execute(tenants.update().where(tenants.c.name == name).values(**values))
        if done.rowcount == 0:
            raise NotFound(f"Tenant {name!r} not found.")


def policy(store: Store, name: str) -> tuple[Any, Any]:
    """``(scope, quota)`` of a tenant as stored."""
    with store.reading() as conn:
        query = sa.select(tenants.c.scope, tenants.c.quota).where(tenants.c.name == name)
        found = conn.execute(query).first()
    if found is None:
        raise NotFound(f"Tenant {name!r} not found.")
    return found.scope, found.quota


def for_token_hash(store: Store, digest: str) -> str | None:
    """The tenant whose token has this sha256, or None (compared in constant time)."""
    with store.reading() as conn:
        found = conn.execute(sa.select(tenants.c.name, tenants.c.token_hash)
                             .where(tenants.c.token_hash == digest)).first()
    if found is None or not hmac.compare_digest(found.token_hash, digest):
        return None
    return str(found.name)


def list_all(store: Store) -> list[dict[str, Any]]:
    with store.reading() as conn:
        rows = conn.execute(sa.select(tenants.c.name, tenants.c.shadow, tenants.c.created_at,
                                      tenants.c.scope, tenants.c.quota)
                            .order_by(tenants.c.name)).mappings().all()
    return [dict(r) for r in rows]
