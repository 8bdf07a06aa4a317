"""The jobs aggregate: lock, read, list, register and change a job row.

``tenant`` scopes every read as in :mod:`evalstop.service.domain`: a tenant name, or None for an
operator; another tenant's job is :class:`NotFound`, exactly as an unknown id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from ..errors import NotFound
from .engine import Store
from .report import released
from .statements import LOCK_JOB
from .tables import jobs, outbox, scores, tenants

#: A job row as the ingest path reads it (a RowMapping, or a dict on SQLite's driver path).
JobRow = Mapping[Any, Any]


def lock(conn: Connection, job_id: str, tenant: str | None) -> RowMapping:
    """The job row joined with its tenant's shadow flag, locked for this transaction."""
    params = {"job_id": job_id} if tenant is None else {"job_id": job_id, "tenant": tenant}
    row = conn.execute(LOCK_JOB[tenant is not None], params).mappings().first()
    if row is None:
        raise NotFound(f"Job {job_id!r} not found.")
    return row


def read_for_ingest(store: Store, conn: Connection, job_id: str, tenant: str | None) -> JobRow:
    """The job row (locked for this transaction), its tenant's shadow flag, and :func:`job_state`."""
    job = store.dialect.read_ingest_job(conn, job_id, tenant)
    if job is None:
        raise NotFound(f"Job {job_id!r} not found.")
    return job


def row(conn: Connection, job_id: str, tenant: str | None) -> RowMapping:
    """The job row (not locked)."""
    query = sa.select(jobs).where(jobs.c.id == job_id)
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    found = conn.execute(query).mappings().first()
    if found is None:
        raise NotFound(f"Job {job_id!r} not found.")
    return found


def get(store: Store, job_id: str, tenant: str | None) -> dict[str, Any]:
    """The job row with its eval count, last step, stop deliveries and ``released`` (state
    ``stopped`` with no delivered stop: released by hand after its stop failed)."""
    with store.reading() as conn:
        job = row(conn, job_id, tenant)
        stats = conn.execute(
            sa.select(sa.func.count(), sa.func.max(scores.c.step))
            .where(scores.c.job_id == job_id, scores.c.metric == job["metric"])
        ).one()
        delivery = conn.execute(
            sa.select(outbox.c.phase, outbox.c.attempts, outbox.c.last_error, outbox.c.delivered_at)
            .where(outbox.c.job_id == job_id).order_by(outbox.c.id)
        ).mappings().all()
    done = any(d["delivered_at"] is not None for d in delivery)
    return {**job, "n_evals": int(stats[0]), "last_step": stats[1],
            "deliveries": [dict(d) for d in delivery], "released": job["state"] == "stopped" and not done}


def list_all(store: Store, tenant: str | None, *, limit: int, offset: int) -> list[dict[str, Any]]:
    query = (sa.select(jobs, released().label("released")).order_by(jobs.c.created_at, jobs.c.id)
             .limit(limit).offset(offset))
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    with store.reading() as conn:
        return [dict(r) for r in conn.execute(query).mappings().all()]


def lock_owner(conn: Connection, tenant: str) -> tuple[Any, Any] | None:
    """The tenant's ``(scope, quota)``, its row locked (registrations of one tenant serialise here)."""
    found = conn.execute(sa.select(tenants.c.scope, tenants.c.quota).where(tenants.c.name == tenant)
                         .with_for_update()).first()
    return None if found is None else (found.scope, found.quota)


def count_live(conn: Connection, tenant: str) -> int:
    live = sa.select(sa.func.count()).where(jobs.c.tenant == tenant, jobs.c.state != "stopped")
    return int(conn.execute(live).scalar_one())


def live_holder(conn: Connection, tenant: str, target: str, ref: str) -> str | None:
    """The id of ``tenant``'s live job that holds ``target``/``ref``, if any."""
    holder = conn.execute(sa.select(jobs.c.id).where(
        jobs.c.tenant == tenant, jobs.c.target == target, jobs.c.external_ref == ref,
        jobs.c.state != "stopped")).scalar()
    return None if holder is None else str(holder)


def insert(conn: Connection, values: Mapping[str, Any]) -> bool:
    """Insert the job row; False when another live job of its tenant holds its reference (the
    unique index)."""
    try:
        with conn.begin_nested():
            conn.execute(jobs.insert().values(**values))
    except sa.exc.IntegrityError:
        return False
    return True


def update(conn: Connection, job_id: str, **values: Any) -> None:
    """Change the job row's columns other than its state (``service/lifecycle.py`` owns that)."""
    if "state" in values:
        raise ValueError(f"job {job_id}: its state changes through evalstop.service.lifecycle.move only")
    conn.execute(jobs.update().where(jobs.c.id == job_id).values(**values))


def set_state(conn: Connection, job_id: str, state: str, **values: Any) -> None:
    """Write the job's state (and ``values``): called by ``service/lifecycle.py`` only, which
    checks the transition first."""
    conn.execute(jobs.update().where(jobs.c.id == job_id).values(state=state, **values))


def latest_step(conn: Connection, job_id: str, metric: str) -> int | None:
    """The latest stored step of ``metric`` for the job."""
    found = conn.execute(sa.select(sa.func.max(scores.c.step)).where(
        scores.c.job_id == job_id, scores.c.metric == metric)).scalar()
    return None if found is None else int(found)
