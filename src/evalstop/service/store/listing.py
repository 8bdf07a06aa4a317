"""The console's job list: filtered, sorted and limited by the database."""

from __future__ import annotations

from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .engine import Store
from .tables import decisions, jobs, scores, tenants


class JobFilter(Protocol):
    """What the list is filtered and sorted by (the console's ``Filters``)."""

    @property
    def state(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def shadow(self) -> str: ...  # "", "yes", "no"
    @property
    def q(self) -> str: ...
    @property
    def sort(self) -> str: ...
    @property
    def desc(self) -> bool: ...


def _last(column: Any) -> sa.ScalarSelect[Any]:
    return (sa.select(column).where(scores.c.job_id == jobs.c.id, scores.c.metric == jobs.c.metric)
            .order_by(scores.c.step.desc()).limit(1).scalar_subquery())


def job_rows(
    store: Store, tenant: str | None, f: JobFilter, limit: int
) -> tuple[list[dict[str, Any]], int, dict[str, list[dict[str, Any]]]]:
    """The jobs ``f`` selects, sorted (by creation when ``f.sort`` is not a column), at most
    ``limit``; how many matched; and the decisions of the jobs returned, by job id."""
    shadow = sa.or_(jobs.c.shadow, tenants.c.shadow)
    last_step, last_value = _last(scores.c.step).label("last_step"), _last(scores.c.value).label("last_value")
    query = (sa.select(jobs.c.id, jobs.c.tenant, jobs.c.name, jobs.c.detector, jobs.c.state, jobs.c.override,
                       jobs.c.created_at, jobs.c.gpus, shadow.label("shadow"), last_step, last_value)
             .join(tenants, tenants.c.name == jobs.c.tenant).where(*_where(tenant, f, shadow)))
    count = sa.select(sa.func.count()).select_from(jobs).join(tenants, tenants.c.name == jobs.c.tenant) \
        .where(*_where(tenant, f, shadow))
    columns = {"created": jobs.c.created_at, "name": jobs.c.name, "tenant": jobs.c.tenant,
               "state": jobs.c.state, "rule": jobs.c.detector, "last_step": last_step,
               "last_value": last_value}
    by = columns.get(f.sort, jobs.c.created_at)
    ordered = (by.desc().nulls_last() if f.desc else by.asc().nulls_first())
    tie = (jobs.c.created_at.desc(), jobs.c.id.desc()) if f.desc else (jobs.c.created_at, jobs.c.id)
    if f.sort not in columns:
        ordered = jobs.c.created_at.desc()
    with store.reading() as conn:
        total = int(conn.execute(count).scalar_one())
        rows = [dict(r) for r in conn.execute(query.order_by(ordered, *tie).limit(limit)).mappings().all()]
        found = _decisions(conn, [r["id"] for r in rows])
    return rows, total, found


def _where(tenant: str | None, f: JobFilter, shadow: sa.ColumnElement[bool]) -> list[sa.ColumnElement[bool]]:
    where: list[sa.ColumnElement[bool]] = []
    if tenant is not None:
        where.append(jobs.c.tenant == tenant)
    if f.tenant:
        where.append(jobs.c.tenant == f.tenant)
    if f.state:
        where.append(jobs.c.state == f.state)
    if f.rule:
        where.append(sa.or_(jobs.c.detector == f.rule, jobs.c.detector.startswith(f.rule + ":")))
    if f.shadow:
        where.append(shadow if f.shadow == "yes" else sa.not_(shadow))
    if f.q:
        pattern = "%" + f.q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append(sa.or_(jobs.c.name.like(pattern, escape="\\"),
                            jobs.c.external_ref.like(pattern, escape="\\"), jobs.c.id == f.q))
    return where


def _decisions(conn: Connection, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for start in range(0, len(ids), 500):
        query = (sa.select(decisions.c.job_id, decisions.c.source, decisions.c.shadow, decisions.c.step)
                 .where(decisions.c.job_id.in_(ids[start:start + 500])).order_by(decisions.c.id))
        for d in conn.execute(query).mappings():
            out.setdefault(d["job_id"], []).append(dict(d))
    return out


def detectors(store: Store, tenant: str | None) -> list[str]:
    """The distinct detector specs of the jobs in scope."""
    query = sa.select(jobs.c.detector).distinct()
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    with store.reading() as conn:
        return [str(s) for s in conn.execute(query).scalars()]
