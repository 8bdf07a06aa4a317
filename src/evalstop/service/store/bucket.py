"""The buckets aggregate: each tenant's token bucket where replicas share it
(``fairness.SharedTokenBuckets``)."""

from __future__ import annotations

import sqlalchemy as sa

from .engine import Store
from .tables import tenant_buckets


def lease(
    store: Store, tenant: str, need: float, want: float, cap: float, rate: float
) -> tuple[float, float]:
    """Take ``want`` tokens (at least ``need``, else none) from the tenant's shared bucket of
    capacity ``cap`` refilled at ``rate``/s on the database's clock; return (tokens granted,
    tokens the bucket held). One short transaction with the tenant's row locked, committed
    without waiting for its WAL flush (losing a bucket update in a crash only refills it)."""
    now_sql = store.dialect.now()
    with store.engine.begin() as conn:
        store.dialect.commit_without_flush(conn)
        locked = (sa.select(tenant_buckets.c.tokens, tenant_buckets.c.at, now_sql.label("now"))
                  .where(tenant_buckets.c.tenant == tenant).with_for_update())
        row = conn.execute(locked).first()
        if row is None:  # first lease: a full bucket (another replica may insert it first)
            now = float(conn.execute(sa.select(now_sql)).scalar_one())
            insert = store.dialect.insert_ignore(tenant_buckets)
            conn.execute(insert.values(tenant=tenant, tokens=cap, at=now))
            row = conn.execute(locked).one()
        now = float(row.now)
        tokens = min(cap, float(row.tokens) + max(0.0, now - float(row.at)) * rate)
        granted = min(tokens, want) if tokens >= need else 0.0
        conn.execute(tenant_buckets.update().where(tenant_buckets.c.tenant == tenant)
                     .values(tokens=tokens - granted, at=max(now, float(row.at))))
    return granted, tokens
