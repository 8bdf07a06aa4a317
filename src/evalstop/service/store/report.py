"""The rows the savings reports (:mod:`evalstop.service.reports`) are computed from."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .engine import Store
from .tables import decisions, jobs, outbox, scores, tenants

_JOB_COLS = (jobs.c.id, jobs.c.tenant, jobs.c.name, jobs.c.gpus, jobs.c.created_at,
             jobs.c.expected_duration_s, jobs.c.state)


def _last_seen() -> sa.ScalarSelect[Any]:
    return (sa.select(sa.func.max(scores.c.received_at)).where(scores.c.job_id == jobs.c.id)
            .scalar_subquery())


def delivered() -> sa.Exists:
    """The job's stop was delivered: an outbox row of it reached ``done`` (the adapter confirmed
    the job stopped). A job released by hand after its stop failed is ``stopped`` without one."""
    return sa.exists().where(outbox.c.job_id == jobs.c.id, outbox.c.delivered_at.is_not(None))


def released() -> sa.ColumnElement[bool]:
    """The job was released by hand: state ``stopped`` with no delivered stop (its stop failed,
    then someone closed it). The API keeps ``state`` ``stopped`` and says this beside it."""
    return sa.and_(jobs.c.state == "stopped", sa.not_(delivered()))


def _tenant_names(conn: Connection, tenant: str | None) -> list[str]:
    if tenant is not None:
        return [tenant]
    return [str(n) for n in conn.execute(sa.select(tenants.c.name).order_by(tenants.c.name)).scalars()]


def shadow_decisions(store: Store, tenant: str | None) -> tuple[list[str], dict[str, bool], list[Any]]:
    """The tenants in scope, their shadow flags, and every shadow detector decision with its job
    (``id, tenant, name, gpus, created_at, expected_duration_s, state, last_seen, step, reason,
    decided_at, delivered``: whether the job was then stopped by an enforced, delivered stop;
    ``decision``: ``stop``, or ``rewind`` for a job under a rewind policy), in decision order."""
    query = (sa.select(*_JOB_COLS, _last_seen().label("last_seen"), decisions.c.step,
                       decisions.c.reason, decisions.c.created_at.label("decided_at"),
                       delivered().label("delivered"), decisions.c.decision)
             .join(decisions, decisions.c.job_id == jobs.c.id)
             .where(decisions.c.shadow.is_(True), decisions.c.source == "detector")
             .order_by(decisions.c.created_at, jobs.c.id))
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    with store.reading() as conn:
        names = _tenant_names(conn, tenant)
        flags = conn.execute(sa.select(tenants.c.name, tenants.c.shadow)).all()
        shadow_flags = {str(k): bool(v) for k, v in flags}
        rows = list(conn.execute(query).all())
    return names, shadow_flags, rows


def stopped_jobs(store: Store, tenant: str | None) -> tuple[list[str], list[Any]]:
    """The tenants in scope, and the jobs in state ``stopped`` (with ``last_seen``, ``stopped_at``
    and ``delivered``: False for a job released by hand after its stop failed), in stop order."""
    query = (sa.select(*_JOB_COLS, _last_seen().label("last_seen"), jobs.c.stopped_at,
                       delivered().label("delivered"))
             .where(jobs.c.state == "stopped", jobs.c.stopped_at.is_not(None))
             .order_by(jobs.c.stopped_at, jobs.c.id))
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    with store.reading() as conn:
        names = _tenant_names(conn, tenant)
        rows = list(conn.execute(query).all())
    return names, rows
