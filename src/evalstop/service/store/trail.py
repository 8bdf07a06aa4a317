"""The audit aggregate: who changed a job by hand (one row per accepted change, written in the
change's own transaction), and the delivery history of a job's stop."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .engine import Store
from .tables import audit, delivery_events, outbox


def record(conn: Connection, job_id: str, now: float, **fields: Any) -> None:
    """One audit row (``principal, actor, action, reason, channel``) in the caller's transaction."""
    conn.execute(audit.insert().values(job_id=job_id, created_at=now, **fields))


def list_for(store: Store, job_id: str) -> list[dict[str, Any]]:
    query = (sa.select(audit.c.principal, audit.c.actor, audit.c.action, audit.c.reason, audit.c.channel,
                       audit.c.created_at).where(audit.c.job_id == job_id).order_by(audit.c.id))
    with store.reading() as conn:
        return [dict(r) for r in conn.execute(query).mappings().all()]


def deliveries(store: Store, job_id: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """The job's outbox rows ``(id, created_at)``, and its delivery events in order."""
    with store.reading() as conn:
        queued = list(conn.execute(sa.select(outbox.c.id, outbox.c.created_at)
                                   .where(outbox.c.job_id == job_id)).all())
        events = conn.execute(
            sa.select(delivery_events.c.outbox_id, delivery_events.c.phase, delivery_events.c.attempts,
                      delivery_events.c.error, delivery_events.c.created_at)
            .where(delivery_events.c.job_id == job_id).order_by(delivery_events.c.id)).mappings().all()
    return queued, [dict(e) for e in events]
