"""What the console pages show, read through the store and domain layers. ``tenant`` scopes
every read as in :mod:`evalstop.service.domain` (None = operator)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ...detectors import Eval, parse_spec
from .. import controls, domain
from ..store import Store, decisions, jobs, scores, tenants
from .charts import curve_svg
from .evidence import explain

STATES = ("running", "stopping", "stopped", "stop_failed")
SORTS = ("created", "name", "tenant", "state", "rule", "last_step", "last_value", "decision")
MAX_LISTED = 500
MAX_DECISION_SORT = 5000


@dataclass(frozen=True)
class Filters:
    state: str = ""
    tenant: str = ""
    rule: str = ""
    shadow: str = ""  # "", "yes", "no"
    q: str = ""
    sort: str = "created"
    desc: bool = True

    @classmethod
    def parse(cls, params: Any) -> Filters:
        sort = params.get("sort", "created")
        return cls(state=_pick(params.get("state", ""), ("", *STATES)), tenant=params.get("tenant", "")[:64],
                   rule=params.get("rule", "")[:64],
                   shadow=_pick(params.get("shadow", ""), ("", "yes", "no")),
                   q=params.get("q", "")[:200], sort=sort if sort in SORTS else "created",
                   desc=params.get("dir", "desc") != "asc")

    def query(self, **change: Any) -> dict[str, str]:
        """These filters as query parameters, with ``change`` applied (for links)."""
        values = {"state": self.state, "tenant": self.tenant, "rule": self.rule, "shadow": self.shadow,
                  "q": self.q, "sort": self.sort, "dir": "desc" if self.desc else "asc"}
        values.update(change)
        return {k: v for k, v in values.items() if v}


def _pick(value: str, allowed: tuple[str, ...]) -> str:
    return value if value in allowed else ""


def rule_name(spec: str) -> str:
    return spec.partition(":")[0]


def _last(column: Any) -> sa.ScalarSelect[Any]:
    return (sa.select(column).where(scores.c.job_id == jobs.c.id, scores.c.metric == jobs.c.metric)
            .order_by(scores.c.step.desc()).limit(1).scalar_subquery())


def job_rows(store: Store, tenant: str | None, f: Filters) -> tuple[list[dict[str, Any]], int]:
    """The jobs the filters select, sorted, at most :data:`MAX_LISTED`; and how many matched.
    The database sorts and limits (by the decision column: the :data:`MAX_DECISION_SORT` newest
    matching jobs are sorted here)."""
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
    limit = MAX_DECISION_SORT if f.sort == "decision" else MAX_LISTED
    if f.sort == "decision":
        ordered = jobs.c.created_at.desc()
    with store.engine.connect() as conn:
        total = int(conn.execute(count).scalar_one())
        rows = [dict(r) for r in conn.execute(query.order_by(ordered, *tie).limit(limit)).mappings().all()]
        found = _decisions(conn, [r["id"] for r in rows])
    for r in rows:
        r["rule"] = rule_name(r["detector"])
        r["decision"] = _decision_text(found.get(r["id"], []))
    if f.sort == "decision":
        rows.sort(key=lambda r: (r["decision"], r["created_at"], r["id"]), reverse=f.desc)
    return rows[:MAX_LISTED], total


def _where(tenant: str | None, f: Filters, shadow: sa.ColumnElement[bool]) -> list[sa.ColumnElement[bool]]:
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


def _decisions(conn: sa.Connection, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for start in range(0, len(ids), 500):
        query = (sa.select(decisions.c.job_id, decisions.c.source, decisions.c.shadow, decisions.c.step)
                 .where(decisions.c.job_id.in_(ids[start:start + 500])).order_by(decisions.c.id))
        for d in conn.execute(query).mappings():
            out.setdefault(d["job_id"], []).append(dict(d))
    return out


def _decision_text(found: list[dict[str, Any]]) -> str:
    enforced = [d for d in found if not d["shadow"]]
    if enforced:
        d = enforced[0]
        return "stop now (override)" if d["source"] == "override" else f"stop at step {d['step']}"
    if found:
        return f"shadow stop at step {found[0]['step']}"
    return ""


def rules_and_tenants(store: Store, tenant: str | None) -> tuple[list[str], list[str]]:
    """The rule names and tenant names the filter menus offer."""
    query = sa.select(jobs.c.detector).distinct()
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    with store.engine.connect() as conn:
        rules = sorted({rule_name(s) for s in conn.execute(query).scalars()})
    names = [t["name"] for t in domain.list_tenants(store)] if tenant is None else [tenant]
    return rules, names


@dataclass
class JobPage:
    job: dict[str, Any]
    decisions: list[dict[str, Any]]
    history: list[dict[str, Any]]
    audit: list[dict[str, Any]]
    chart: Any
    verdict: Any
    evidence: Any
    shown: dict[str, Any] | None = None  # the decision the markers show
    marker: dict[str, Any] = field(default_factory=dict)


def job_page(store: Store, job_id: str, tenant: str | None) -> JobPage:
    """Everything the job page shows; NotFound for an unknown job or another tenant's."""
    job = domain.get_job(store, job_id, tenant)
    rows = domain.list_scores(store, job_id, tenant, limit=store.limits.max_history)
    evals = [Eval(r["step"], r["value"], r["progress"], r["loss"]) for r in rows]
    evidence = explain(parse_spec(job["detector"]), evals)
    found = domain.list_decisions(store, job_id, tenant)
    shown = next((d for d in found if not d["shadow"]), found[0] if found else None)
    verdict = evidence.verdict
    if shown is not None:
        label = "shadow stop" if shown["shadow"] else "stop" if shown["source"] == "detector" else "stop now"
        marker = {"best_step": shown["best_step"], "stop_step": shown["step"], "label": label}
    elif verdict.stopped:
        marker = {"best_step": verdict.best_step, "stop_step": verdict.stop_step,
                  "label": "rule fired, not stopped (never_stop)"}
    else:
        marker = {"best_step": verdict.best_step, "stop_step": None, "label": ""}
    chart = curve_svg([(r["step"], r["value"]) for r in rows], evidence, best_step=marker["best_step"],
                      stop_step=marker["stop_step"], stop_label=marker["label"])
    return JobPage(job, found, controls.delivery_history(store, job_id, tenant),
                   controls.list_audit(store, job_id, tenant), chart, verdict, evidence, shown, marker)
