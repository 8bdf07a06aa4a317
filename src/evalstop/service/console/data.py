"""What the console pages show, read through the store and domain layers. ``tenant`` scopes
every read as in :mod:`evalstop.service.domain` (None = operator)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...detectors import Eval, parse_spec
from .. import controls, domain
from ..store import Store, listing
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


def job_rows(store: Store, tenant: str | None, f: Filters) -> tuple[list[dict[str, Any]], int]:
    """The jobs the filters select, sorted, at most :data:`MAX_LISTED`; and how many matched.
    The database sorts and limits (by the decision column: the :data:`MAX_DECISION_SORT` newest
    matching jobs are sorted here)."""
    limit = MAX_DECISION_SORT if f.sort == "decision" else MAX_LISTED
    rows, total, found = listing.job_rows(store, tenant, f, limit)
    for r in rows:
        r["rule"] = rule_name(r["detector"])
        r["decision"] = _decision_text(found.get(r["id"], []))
    if f.sort == "decision":
        rows.sort(key=lambda r: (r["decision"], r["created_at"], r["id"]), reverse=f.desc)
    return rows[:MAX_LISTED], total


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
    rules = sorted({rule_name(s) for s in listing.detectors(store, tenant)})
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
