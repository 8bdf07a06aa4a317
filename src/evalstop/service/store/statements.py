"""Statements the ingest path runs on every request, built once (SQLAlchemy then skips building
the expression and its cache key per request: a third of the per-request CPU before, by profile)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .tables import decisions, jobs, scores, tenants


def lock_query(scoped: bool) -> sa.Select[Any]:
    """The job row joined with its tenant's shadow flag, locked ``FOR UPDATE`` (PostgreSQL)."""
    query = (sa.select(jobs, tenants.c.shadow.label("tenant_shadow"))
             .join(tenants, tenants.c.name == jobs.c.tenant).where(jobs.c.id == sa.bindparam("job_id"))
             .with_for_update(of=jobs))
    return query.where(jobs.c.tenant == sa.bindparam("tenant")) if scoped else query


LOCK_JOB = {scoped: lock_query(scoped) for scoped in (False, True)}

#: The job columns the ingest path reads (with the tenant's shadow flag and :func:`job_state`):
#: only these, because every column of a result costs the driver a description entry per request.
INGEST_COLUMNS = ("id", "metric", "detector", "state", "override", "shadow", "monitor_state")


def ingest_job(scoped: bool, *, lock: bool) -> sa.Select[Any]:
    """The job's :data:`INGEST_COLUMNS` (``monitor_state`` as text) and its tenant's shadow flag
    (as ``tenant_shadow``); with ``lock``, the job row locked ``FOR UPDATE`` (PostgreSQL), else
    with :func:`job_state` too (SQLite, whose transaction already holds the write lock)."""
    state = [] if lock else job_state(jobs.c.id, jobs.c.metric)
    # the monitor as its stored text: the driver does not parse it, and ingest compares it with
    # the text it kept (service/monitoring.py, MEMO)
    columns = [sa.cast(jobs.c[n], sa.Text).label(n) if n == "monitor_state" else jobs.c[n]
               for n in INGEST_COLUMNS]
    query = (sa.select(*columns, tenants.c.shadow.label("tenant_shadow"), *state)
             .join(tenants, tenants.c.name == jobs.c.tenant).where(jobs.c.id == sa.bindparam("job_id")))
    if lock:
        query = query.with_for_update(of=jobs)
    return query.where(jobs.c.tenant == sa.bindparam("tenant")) if scoped else query


def job_state(job_id: Any, metric: Any) -> list[sa.ColumnElement[Any]]:
    """What ingest needs to know besides the job row: the watched metric's latest stored step,
    and which decisions the job has."""
    def decided(*where: sa.ColumnElement[bool]) -> sa.Exists:
        return sa.exists().where(decisions.c.job_id == job_id, *where)

    # ORDER BY .. LIMIT 1, not max(): with the metric from a subquery, PostgreSQL's max() read
    # every stored step of the job (0.8 ms at 5,000 evals); this reads one index entry.
    latest = (sa.select(scores.c.step).where(scores.c.job_id == job_id, scores.c.metric == metric)
              .order_by(scores.c.step.desc()).limit(1))
    return [latest.scalar_subquery().label("latest"),
            decided(decisions.c.enforced.is_(True), decisions.c.decision == "stop").label("enforced"),
            decided(decisions.c.shadow.is_(True)).label("shadow_stop"),
            decided(decisions.c.source == "detector").label("detector_decided")]


#: PostgreSQL: read AFTER the row lock is granted, in a second statement, so that (read
#: committed) it sees every commit made before the lock. It names the job only (its metric is
#: read in the statement), so it can be sent with the lock in one round trip (a pipeline).
_METRIC = sa.select(jobs.c.metric).where(jobs.c.id == sa.bindparam("job_id")).scalar_subquery()
JOB_STATE = sa.select(*job_state(sa.bindparam("job_id"), _METRIC))


