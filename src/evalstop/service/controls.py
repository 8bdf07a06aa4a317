"""Hand controls on a job and their records: the audit trail (who changed a job, when, why),
the delivery history of its stop, retrying a stop that failed, and releasing a job whose stop
failed for good (its external reference is then free for a new registration).

The API and the console call the same functions, so both leave the same audit rows. ``tenant``
scopes every call as in :mod:`evalstop.service.domain` (None = operator).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .errors import Conflict, InvalidInput
from .ingest import lock_job
from .store import Store, audit, delivery_events, jobs, outbox

ACTIONS = ("stop_now", "never_stop", "resume", "retry_stop", "release", "shadow_on", "shadow_off")
MAX_REASON = 1000


@dataclass(frozen=True)
class Actor:
    """Who acts: the authenticated principal (``tenant`` None = operator), the name the person
    gave (console sign-in; self-declared, shown beside the principal), and the channel."""

    tenant: str | None
    name: str = ""
    channel: str = "api"

    @property
    def principal(self) -> str:
        return "operator" if self.tenant is None else f"tenant:{self.tenant}"

    @property
    def display(self) -> str:
        return f"{self.name} ({self.principal})" if self.name else self.principal


def record(conn: Connection, job_id: str, actor: Actor, action: str, reason: str, now: float) -> None:
    """Add one audit row in the caller's transaction (so it commits with the change it records)."""
    if action not in ACTIONS:
        raise ValueError(f"audit action must be one of {', '.join(ACTIONS)}. Got {action!r} instead.")
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"reason must be at most {MAX_REASON} characters. Got {len(reason)}.")
    conn.execute(audit.insert().values(
        job_id=job_id, principal=actor.principal, actor=(actor.name or actor.principal)[:200], action=action,
        reason=reason, channel=actor.channel, created_at=now))


def list_audit(store: Store, job_id: str, tenant: str | None) -> list[dict[str, Any]]:
    """The job's audit trail, oldest first."""
    from .domain import get_job

    get_job(store, job_id, tenant)  # NotFound for another tenant's job
    query = (sa.select(audit.c.principal, audit.c.actor, audit.c.action, audit.c.reason, audit.c.channel,
                       audit.c.created_at).where(audit.c.job_id == job_id).order_by(audit.c.id))
    with store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings().all()]


def delivery_history(store: Store, job_id: str, tenant: str | None) -> list[dict[str, Any]]:
    """Every step of the job's stop delivery, oldest first: ``queued`` (the decision put it in the
    outbox; the ``pin`` phase is next), each phase entered, each failed attempt with its error,
    and each retry."""
    from .domain import get_job

    get_job(store, job_id, tenant)
    with store.engine.connect() as conn:
        queued = conn.execute(sa.select(outbox.c.id, outbox.c.created_at)
                              .where(outbox.c.job_id == job_id)).all()
        events = conn.execute(
            sa.select(delivery_events.c.outbox_id, delivery_events.c.phase, delivery_events.c.attempts,
                      delivery_events.c.error, delivery_events.c.created_at)
            .where(delivery_events.c.job_id == job_id).order_by(delivery_events.c.id)).mappings().all()
    rows = [{"outbox_id": q.id, "phase": "queued", "attempts": 0, "error": None, "created_at": q.created_at}
            for q in queued]
    rows += [dict(e) for e in events]
    return sorted(rows, key=lambda r: (r["created_at"], r["phase"] != "queued"))


def retry_stop(store: Store, job_id: str, actor: Actor, reason: str = "") -> dict[str, Any]:
    """Put a failed stop (job ``stop_failed``) back in the outbox from its first phase (every
    adapter call is idempotent, so the phases already done have no second effect)."""
    from .domain import get_job

    now = store.clock()
    with store.transaction() as conn:
        job = lock_job(conn, job_id, actor.tenant)
        if job["state"] != "stop_failed":
            raise Conflict(
                f"Job {job_id} is {job['state']}; only a failed stop (stop_failed) can be retried.")
        failed = sa.and_(outbox.c.job_id == job_id, outbox.c.phase == "failed")
        last_failed = sa.select(outbox.c.id).where(failed).order_by(outbox.c.id.desc()).limit(1)
        row_id = conn.execute(last_failed).scalar()
        if row_id is None:
            raise Conflict(f"Job {job_id} has no failed stop in the outbox.")
        conn.execute(outbox.update().where(outbox.c.id == row_id).values(
            phase="pin", attempts=0, next_attempt_at=now, lease_until=None, lease_owner=None,
            last_error=None, lease_epoch=outbox.c.lease_epoch + 1))  # fences any stale writer
        conn.execute(delivery_events.insert().values(outbox_id=row_id, job_id=job_id, phase="retry",
                                                     attempts=0, error=None, created_at=now))
        conn.execute(jobs.update().where(jobs.c.id == job_id).values(state="stopping"))
        record(conn, job_id, actor, "retry_stop", reason, now)
    return get_job(store, job_id, actor.tenant)


def release(store: Store, job_id: str, actor: Actor, reason: str = "") -> dict[str, Any]:
    """Close a job whose stop failed (``stop_failed``) without stopping it through evalstop:
    the job becomes ``stopped`` (it ended, or it was handled by hand), which frees its external
    reference for a new job; its failed outbox row and delivery history stay as they are."""
    from .domain import get_job

    now = store.clock()
    with store.transaction() as conn:
        job = lock_job(conn, job_id, actor.tenant)
        if job["state"] != "stop_failed":
            raise Conflict(
                f"Job {job_id} is {job['state']}; only a job whose stop failed (stop_failed) "
                "can be released.")
        conn.execute(jobs.update().where(jobs.c.id == job_id).values(state="stopped", stopped_at=now))
        record(conn, job_id, actor, "release", reason, now)
    return get_job(store, job_id, actor.tenant)
