"""The console's reads: the job list (filtered, sorted and paged by the database) and a job's
stored monitor."""

from __future__ import annotations

from typing import Any, Protocol

import sqlalchemy as sa

from .engine import Store
from .report import delivered
from .tables import decisions, jobs, rewound_scores, scores, tenants

#: The decision column's sort key is ``(kind, step)``: kind 0 no decision, 1 a rewind (the job
#: goes on; its latest one is shown), 2 a shadow rewind, 3 a shadow stop, 4 a stop by the rule, 5
#: a ``stop_now`` override; then the decision's step, as a number.
DECISION_KINDS = {0: "", 1: "rewind", 2: "shadow rewind", 3: "shadow", 4: "detector", 5: "override"}


class JobFilter(Protocol):
    """What the list is filtered, sorted and paged by (the console's ``Filters``)."""

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
    @property
    def page(self) -> int: ...  # 1-based


def _last(column: Any) -> sa.ScalarSelect[Any]:
    return (sa.select(column).where(scores.c.job_id == jobs.c.id, scores.c.metric == jobs.c.metric)
            .order_by(scores.c.step.desc()).limit(1).scalar_subquery())


def _shown_decision(column: Any) -> sa.ScalarSelect[Any]:
    """``column`` of the decision the list shows: the job's first enforced stop, else its first
    shadow stop, else its latest rewind."""
    rewind = sa.and_(decisions.c.decision == "rewind", sa.not_(decisions.c.shadow))
    return (sa.select(column).where(decisions.c.job_id == jobs.c.id)
            .order_by(rewind, decisions.c.shadow, sa.case((rewind, -decisions.c.id), else_=decisions.c.id))
            .limit(1).scalar_subquery())


def shown_state() -> sa.ColumnElement[Any]:
    """The job's state as the console shows it: ``released`` for a job in state ``stopped`` whose
    stop was never delivered (it was released by hand after the stop failed)."""
    return sa.case((sa.and_(jobs.c.state == "stopped", sa.not_(delivered())), "released"),
                   else_=jobs.c.state)


def job_rows(
    store: Store, tenant: str | None, f: JobFilter, page_size: int
) -> tuple[list[dict[str, Any]], int]:
    """Page ``f.page`` (clamped to the last page) of the jobs ``f`` selects, sorted by ``f.sort``
    (creation when it names no column), at most ``page_size`` rows; and how many matched. Each
    row has ``decision_kind`` (see :data:`DECISION_KINDS`) and ``decision_step``."""
    shadow = sa.or_(jobs.c.shadow, tenants.c.shadow)
    state_now = shown_state()
    state = state_now.label("state")
    last_step, last_value = _last(scores.c.step).label("last_step"), _last(scores.c.value).label("last_value")
    rewind, shadow_one = decisions.c.decision == "rewind", decisions.c.shadow
    kind = sa.case((sa.and_(rewind, sa.not_(shadow_one)), 1), (sa.and_(rewind, shadow_one), 2),
                   (shadow_one, 3), (decisions.c.source == "override", 5), else_=4)
    decision_kind = sa.func.coalesce(_shown_decision(kind), 0).label("decision_kind")
    decision_step = _shown_decision(decisions.c.step).label("decision_step")
    where = _where(tenant, f, shadow, state_now)
    query = (sa.select(jobs.c.id, jobs.c.tenant, jobs.c.name, jobs.c.detector, state, jobs.c.override,
                       jobs.c.created_at, jobs.c.gpus, shadow.label("shadow"), last_step, last_value,
                       decision_kind, decision_step)
             .join(tenants, tenants.c.name == jobs.c.tenant).where(*where))
    count = sa.select(sa.func.count()).select_from(jobs).join(tenants, tenants.c.name == jobs.c.tenant) \
        .where(*where)
    columns: dict[str, tuple[Any, ...]] = {
        "created": (), "name": (jobs.c.name,), "tenant": (jobs.c.tenant,), "state": (state,),
        "rule": (jobs.c.detector,), "last_step": (last_step,), "last_value": (last_value,),
        "decision": (decision_kind, decision_step)}
    by = columns.get(f.sort, ())
    ordered = [c.desc().nulls_last() if f.desc else c.asc().nulls_first() for c in by]
    tie = (jobs.c.created_at.desc(), jobs.c.id.desc()) if f.desc else (jobs.c.created_at, jobs.c.id)
    with store.reading() as conn:
        total = int(conn.execute(count).scalar_one())
        pages = max(1, -(-total // page_size))
        offset = (min(max(1, f.page), pages) - 1) * page_size
        found = conn.execute(query.order_by(*ordered, *tie).limit(page_size).offset(offset)).mappings()
        rows = [dict(r) for r in found.all()]
    return rows, total


def _where(
    tenant: str | None, f: JobFilter, shadow: sa.ColumnElement[bool], state: sa.ColumnElement[Any]
) -> list[sa.ColumnElement[bool]]:
    where: list[sa.ColumnElement[bool]] = []
    if tenant is not None:
        where.append(jobs.c.tenant == tenant)
    if f.tenant:
        where.append(jobs.c.tenant == f.tenant)
    if f.state:
        where.append(state == f.state if f.state in ("stopped", "released") else jobs.c.state == f.state)
    if f.rule:
        where.append(sa.or_(jobs.c.detector == f.rule, jobs.c.detector.startswith(f.rule + ":")))
    if f.shadow:
        where.append(shadow if f.shadow == "yes" else sa.not_(shadow))
    if f.q:
        pattern = "%" + f.q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append(sa.or_(jobs.c.name.like(pattern, escape="\\"),
                            jobs.c.external_ref.like(pattern, escape="\\"), jobs.c.id == f.q))
    return where


def detectors(store: Store, tenant: str | None) -> list[str]:
    """The distinct detector specs of the jobs in scope."""
    query = sa.select(jobs.c.detector).distinct()
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    with store.reading() as conn:
        return [str(s) for s in conn.execute(query).scalars()]


def job_extras(store: Store, job_id: str) -> tuple[Any, bool, bool]:
    """A job's stored monitor state (``Monitor.to_json()``, or None), whether its tenant is in
    shadow mode, and whether its stop was delivered. The caller has authorized the job."""
    query = (sa.select(jobs.c.monitor_state, tenants.c.shadow, delivered().label("delivered"))
             .join(tenants, tenants.c.name == jobs.c.tenant).where(jobs.c.id == job_id))
    with store.reading() as conn:
        row = conn.execute(query).first()
    if row is None:
        return None, False, False
    return row.monitor_state, bool(row.shadow), bool(row.delivered)


def tenant_shadow(store: Store, tenant: str) -> bool:
    """Whether ``tenant`` is in shadow mode (its jobs' stops are recorded, not enforced)."""
    with store.reading() as conn:
        return bool(conn.execute(sa.select(tenants.c.shadow).where(tenants.c.name == tenant)).scalar())


def rewound(store: Store, job_id: str, metric: str) -> list[tuple[int, int, float]]:
    """``(attempt, step, value)`` of the job's scores of ``metric`` that its rewinds discarded
    (attempt 0 is the first run), by attempt then step. The caller has authorized the job."""
    r = rewound_scores.c
    query = (sa.select(r.attempt, r.step, r.value).where(r.job_id == job_id, r.metric == metric)
             .order_by(r.attempt, r.step))
    with store.reading() as conn:
        return [(int(a), int(s), float(v)) for a, s, v in conn.execute(query).all()]
