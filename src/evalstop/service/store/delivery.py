"""The outbox aggregate: claim a due stop with a lease, read it, advance it under its fencing
epoch, and keep its delivery history (``delivery_events``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from .engine import Store
from .tables import decisions, delivery_events, jobs, outbox, tenants

TERMINAL = ("done", "failed")


class Claim(NamedTuple):
    """A leased outbox row: its id, the fencing epoch of this lease, and the job's tenant."""

    row_id: int
    epoch: int
    tenant: str


def claim(
    store: Store, now: float, lease_s: float, owner: str, skip_tenants: Collection[str] = (),
) -> Claim | None:
    """Lease the next due row whose job's tenant is not in ``skip_tenants`` (those already using
    all the delivery slots they may have), or None. On PostgreSQL the row is picked with
    ``FOR UPDATE SKIP LOCKED``, so replicas claiming at once take different rows without waiting
    on each other (only the outbox row is locked: the tenant filter is a subquery, not a join);
    the epoch is bumped by every claim."""
    free = sa.or_(outbox.c.lease_until.is_(None), outbox.c.lease_until < now)
    due = sa.select(outbox.c.id, outbox.c.lease_epoch, outbox.c.job_id).where(
        outbox.c.phase.not_in(TERMINAL), outbox.c.next_attempt_at <= now, free)
    if skip_tenants:
        busy = sa.select(jobs.c.id).where(jobs.c.id == outbox.c.job_id,
                                         jobs.c.tenant.in_(sorted(skip_tenants)))
        due = due.where(~busy.exists())
    query = store.dialect.claimable(due.order_by(outbox.c.next_attempt_at, outbox.c.id).limit(1))
    with store.transaction() as conn:
        row = conn.execute(query).first()
        if row is None:
            return None
        epoch = int(row.lease_epoch) + 1
        conn.execute(outbox.update().where(outbox.c.id == row.id, outbox.c.lease_epoch == row.lease_epoch)
                     .values(lease_until=now + lease_s, lease_owner=owner, lease_epoch=epoch))
        tenant = conn.execute(sa.select(jobs.c.tenant).where(jobs.c.id == row.job_id)).scalar_one()
    return Claim(int(row.id), epoch, str(tenant))


def release_leases(store: Store, owner: str) -> int:
    """Clear the leases ``owner`` still holds on rows not yet done or failed; return how many."""
    held = outbox.update().where(outbox.c.lease_owner == owner, outbox.c.phase.not_in(TERMINAL))
    with store.transaction() as conn:
        return int(conn.execute(held.values(lease_until=None, lease_owner=None)).rowcount)


def load(store: Store, row_id: int) -> tuple[RowMapping, RowMapping, str | None, dict[str, Any] | None]:
    """The outbox row, its job, the decision's best checkpoint URI, and the tenant's scope."""
    with store.reading() as conn:
        row = conn.execute(sa.select(outbox).where(outbox.c.id == row_id)).mappings().one()
        job = conn.execute(sa.select(jobs).where(jobs.c.id == row["job_id"])).mappings().one()
        uri = conn.execute(sa.select(decisions.c.best_checkpoint_uri)
                           .where(decisions.c.id == row["decision_id"])).scalar()
        scope = conn.execute(sa.select(tenants.c.scope).where(tenants.c.name == job["tenant"])).scalar()
    return row, job, uri, scope


def update(
    conn: Connection, row_id: int, epoch: int, values: Mapping[str, Any], event: Mapping[str, Any] | None,
    now: float,
) -> bool:
    """Update the row if ``epoch`` still holds it (else False, nothing written); with ``event``,
    add a line to its delivery history in the same transaction."""
    fenced = outbox.update().where(outbox.c.id == row_id, outbox.c.lease_epoch == epoch)
    if conn.execute(fenced.values(**values)).rowcount != 1:
        return False
    if event is not None:
        add_event(conn, row_id, event, now)
    return True


def add_event(conn: Connection, row_id: int, event: Mapping[str, Any], now: float) -> None:
    """One line of a stop's delivery history."""
    job_id = sa.select(outbox.c.job_id).where(outbox.c.id == row_id).scalar_subquery()
    conn.execute(delivery_events.insert().values(outbox_id=row_id, job_id=job_id, created_at=now,
                                                 **{"error": None, **event}))


def signalled_at(store: Store, row_id: int) -> float | None:
    with store.reading() as conn:
        value = conn.execute(sa.select(outbox.c.signalled_at).where(outbox.c.id == row_id)).scalar()
    return None if value is None else float(value)


def pending_count(store: Store) -> int:
    """How many outbox rows are not yet done or failed (the backlog)."""
    with store.reading() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(outbox)
                                .where(outbox.c.phase.not_in(TERMINAL))).scalar_one())


def attempts_and_phase(store: Store, row_id: int) -> tuple[int, str]:
    with store.reading() as conn:
        attempts, phase = conn.execute(
            sa.select(outbox.c.attempts, outbox.c.phase).where(outbox.c.id == row_id)).one()
    return int(attempts), str(phase)


def requeue_failed(conn: Connection, job_id: str, now: float) -> int | None:
    """Put the job's last failed outbox row back at its first phase (its epoch bumped, which
    fences any stale writer); return its id, or None when there is none."""
    failed = sa.and_(outbox.c.job_id == job_id, outbox.c.phase == "failed")
    row_id = conn.execute(sa.select(outbox.c.id).where(failed).order_by(outbox.c.id.desc()).limit(1)).scalar()
    if row_id is None:
        return None
    conn.execute(outbox.update().where(outbox.c.id == row_id).values(
        phase="pin", attempts=0, next_attempt_at=now, lease_until=None, lease_owner=None,
        last_error=None, lease_epoch=outbox.c.lease_epoch + 1))
    conn.execute(delivery_events.insert().values(outbox_id=row_id, job_id=job_id, phase="retry",
                                                 attempts=0, error=None, created_at=now))
    return int(row_id)
