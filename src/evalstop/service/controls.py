"""Hand controls on a job and their records: the audit trail (who changed a job, when, why),
the delivery history of its stop, retrying a stop that failed, and releasing a job whose stop
failed for good (its external reference is then free for a new registration).

The API and the console call the same functions, so both leave the same audit rows. ``tenant``
scopes every call as in :mod:`evalstop.service.domain` (None = operator).
"""

from __future__ import annotations

from typing import Any

from . import lifecycle
from .actors import ACTIONS, MAX_REASON, Actor, record
from .domain import get_job
from .errors import Conflict
from .store import Store
from .store import delivery as delivery_store
from .store import job as job_store
from .store import trail as trail_store

__all__ = ["ACTIONS", "MAX_REASON", "Actor", "delivery_history", "list_audit", "record", "release",
           "retry_stop"]


def list_audit(store: Store, job_id: str, tenant: str | None) -> list[dict[str, Any]]:
    """The job's audit trail, oldest first."""
    get_job(store, job_id, tenant)  # NotFound for another tenant's job
    return trail_store.list_for(store, job_id)


def delivery_history(store: Store, job_id: str, tenant: str | None) -> list[dict[str, Any]]:
    """Every step of the job's stop delivery, oldest first: ``queued`` (the decision put it in the
    outbox; the ``pin`` phase is next), each phase entered, each failed attempt with its error,
    and each retry."""
    get_job(store, job_id, tenant)
    queued, events = trail_store.deliveries(store, job_id)
    rows = [{"outbox_id": q.id, "phase": "queued", "attempts": 0, "error": None, "created_at": q.created_at}
            for q in queued]
    rows += events
    return sorted(rows, key=lambda r: (r["created_at"], r["phase"] != "queued"))


def retry_stop(store: Store, job_id: str, actor: Actor, reason: str = "") -> dict[str, Any]:
    """Put a failed stop (job ``stop_failed``) back in the outbox from its first phase (every
    adapter call is idempotent, so the phases already done have no second effect)."""
    now = store.clock()
    with store.transaction() as conn:
        job = job_store.lock(conn, job_id, actor.tenant)
        if job["state"] != lifecycle.STOP_FAILED:
            raise Conflict(
                f"Job {job_id} is {job['state']}; only a failed stop (stop_failed) can be retried.")
        if delivery_store.requeue_failed(conn, job_id, now) is None:
            raise Conflict(f"Job {job_id} has no failed stop in the outbox.")
        lifecycle.move(conn, job, lifecycle.STOPPING, now)
        record(conn, job_id, actor, "retry_stop", reason, now)
    return get_job(store, job_id, actor.tenant)


def release(store: Store, job_id: str, actor: Actor, reason: str = "") -> dict[str, Any]:
    """Close a job whose stop failed (``stop_failed``) without stopping it through evalstop:
    the job becomes ``stopped`` (it ended, or it was handled by hand), which frees its external
    reference for a new job; its failed outbox row and delivery history stay as they are."""
    now = store.clock()
    with store.transaction() as conn:
        job = job_store.lock(conn, job_id, actor.tenant)
        if job["state"] != lifecycle.STOP_FAILED:
            raise Conflict(
                f"Job {job_id} is {job['state']}; only a job whose stop failed (stop_failed) "
                "can be released.")
        lifecycle.move(conn, job, lifecycle.STOPPED, now)
        record(conn, job_id, actor, "release", reason, now)
    return get_job(store, job_id, actor.tenant)
