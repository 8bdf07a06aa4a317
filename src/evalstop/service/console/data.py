"""What the console pages show, read through the store and domain layers. ``tenant`` scopes
every read as in :mod:`evalstop.service.domain` (None = operator)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ...detectors import Detector, Eval, Monitor, NextEval, parse_spec
from .. import controls, domain, lifecycle
from ..store import Store, listing
from .charts import curve_charts
from .evidence import attempts, drawn

STATES = lifecycle.SHOWN
SORTS = ("created", "name", "tenant", "state", "rule", "last_step", "last_value", "decision")
#: Rows per page of the job list (``per`` picks another within ``PAGE_SIZES``).
PAGE_SIZE = 50
PAGE_SIZES = (10, 25, 50, 100, 200)


@dataclass(frozen=True)
class Filters:
    state: str = ""
    tenant: str = ""
    rule: str = ""
    shadow: str = ""  # "", "yes", "no"
    q: str = ""
    sort: str = "created"
    desc: bool = True
    page: int = 1
    per: int = PAGE_SIZE

    @classmethod
    def parse(cls, params: Any) -> Filters:
        sort = params.get("sort", "created")
        per = _number(params.get("per", ""), PAGE_SIZE)
        return cls(state=_pick(params.get("state", ""), ("", *STATES)), tenant=params.get("tenant", "")[:64],
                   rule=params.get("rule", "")[:64],
                   shadow=_pick(params.get("shadow", ""), ("", "yes", "no")),
                   q=params.get("q", "")[:200], sort=sort if sort in SORTS else "created",
                   desc=params.get("dir", "desc") != "asc", page=max(1, _number(params.get("page", ""), 1)),
                   per=per if per in PAGE_SIZES else PAGE_SIZE)

    def query(self, **change: Any) -> dict[str, str]:
        """These filters as query parameters, with ``change`` applied (for links); page 1 and the
        default page size are left out, so a link that changes a filter or the sort starts again
        at page 1 unless it names a page."""
        values: dict[str, Any] = {
            "state": self.state, "tenant": self.tenant, "rule": self.rule, "shadow": self.shadow, "q": self.q,
            "sort": self.sort, "dir": "desc" if self.desc else "asc", "page": self.page, "per": self.per}
        values.update(change)
        if values["page"] == 1:
            values["page"] = ""
        if values["per"] == PAGE_SIZE:
            values["per"] = ""
        return {k: str(v) for k, v in values.items() if v}


def _number(text: str, default: int) -> int:
    return int(text) if text.isdigit() and len(text) < 7 else default


def _pick(value: str, allowed: tuple[str, ...]) -> str:
    return value if value in allowed else ""


def rule_name(spec: str) -> str:
    return spec.partition(":")[0]


@dataclass(frozen=True)
class ListPage:
    """One page of the job list: its rows, how many jobs matched, the page shown and how many."""

    rows: list[dict[str, Any]]
    total: int
    page: int
    pages: int
    per: int

    @property
    def first(self) -> int:
        """The 1-based position of the first row shown (0 when none)."""
        return (self.page - 1) * self.per + 1 if self.rows else 0


def job_rows(store: Store, tenant: str | None, f: Filters) -> ListPage:
    """The page of jobs the filters select: filtered, sorted and paged by the database."""
    rows, total = listing.job_rows(store, tenant, f, f.per)
    for r in rows:
        r["rule"] = rule_name(r["detector"])
        r["decision"] = _decision_text(r["decision_kind"], r["decision_step"])
    pages = max(1, -(-total // f.per))
    return ListPage(rows, total, min(f.page, pages), pages, f.per)


#: What the list's decision column says for each kind of decision (``listing.DECISION_KINDS``).
DECISION_TEXTS = {"": "", "rewind": "rewound at step {step}", "shadow rewind": "shadow rewind at step {step}",
                  "shadow": "shadow stop at step {step}", "detector": "stop at step {step}",
                  "override": "stop now (override)"}


def _decision_text(kind: int, step: int | None) -> str:
    return DECISION_TEXTS[listing.DECISION_KINDS.get(kind, "")].format(step=step)


def rules_and_tenants(store: Store, tenant: str | None) -> tuple[list[str], list[str]]:
    """The rule names and tenant names the filter menus offer."""
    rules = sorted({rule_name(s) for s in listing.detectors(store, tenant)})
    names = [t["name"] for t in domain.list_tenants(store)] if tenant is None else [tenant]
    return rules, names


@dataclass
class JobPage:
    job: dict[str, Any]  # its "state" is "released" for a job released by hand after its stop failed
    decisions: list[dict[str, Any]]
    history: list[dict[str, Any]]
    audit: list[dict[str, Any]]
    chart: Any
    verdict: Any
    evidence: Any
    shown: dict[str, Any] | None = None  # the decision the markers show
    marker: dict[str, Any] = field(default_factory=dict)
    tenant_shadow: bool = False  # the job's tenant is in shadow mode
    next_eval: NextEval | None = None  # what the job's stored monitor asks for next
    released: dict[str, Any] | None = None  # the audit row of the release, for a released job


def job_page(store: Store, job_id: str, tenant: str | None) -> JobPage:
    """Everything the job page shows; NotFound for an unknown job or another tenant's."""
    job = domain.get_job(store, job_id, tenant)
    saved, tenant_shadow, delivered = listing.job_extras(store, job_id)
    rows = domain.list_scores(store, job_id, tenant, limit=store.limits.max_history)
    evals = [Eval(r["step"], r["value"], r["progress"], r["loss"]) for r in rows]
    detector = parse_spec(job["detector"])
    monitor = _stored_monitor(saved, detector, evals)
    rewound = listing.rewound(store, job_id, job["metric"]) if monitor.rewinds else []
    runs = attempts(evals, rewound, monitor.rewinds)
    evidence = drawn(detector, runs, monitor)
    found = domain.list_decisions(store, job_id, tenant)
    audit = controls.list_audit(store, job_id, tenant)
    released = None
    if job["state"] == lifecycle.STOPPED and not delivered:
        job = {**job, "state": lifecycle.RELEASED}
        released = next((a for a in reversed(audit) if a["action"] == "release"), {"reason": ""})
    # the rewinds made are drawn from the stored monitor; a shadow one (not made) is a decision
    stops = [d for d in found if d["decision"] != "rewind" or d["shadow"]]
    shown = next((d for d in stops if not d["shadow"]), stops[0] if stops else None)
    marker = _marker(shown, evidence.verdict)
    points = [[(e.step, e.score) for e in run] for run in runs]
    chart = curve_charts(points, evidence, best_step=marker["best_step"], stop_step=marker["stop_step"],
                         stop_label=marker["label"])
    return JobPage(job, stops, controls.delivery_history(store, job_id, tenant), audit, chart,
                   evidence.verdict, evidence, shown, marker, tenant_shadow, monitor.next_eval(), released)


def _stored_monitor(saved: Any, detector: Detector, evals: list[Eval]) -> Monitor:
    """The job's monitor as ingest stored it; rebuilt from the history when there is none (a job
    registered before monitors were stored) or it cannot be read (the page still shows)."""
    try:
        if saved is not None:
            return Monitor.from_json(saved, detector)
    except (ValueError, KeyError, TypeError):
        pass
    monitor = Monitor(detector)
    try:
        monitor.observe_many(evals)
    except (ArithmeticError, ValueError):  # a rule's bug on these scores: the page still shows
        return Monitor(detector)
    return monitor


def _marker(shown: dict[str, Any] | None, verdict: Any) -> dict[str, Any]:
    if shown is not None:
        if shown["shadow"]:
            label = "shadow rewind" if shown["decision"] == "rewind" else "shadow stop"
        else:
            label = "stop" if shown["source"] == "detector" else "stop now"
        return {"best_step": shown["best_step"], "stop_step": shown["step"], "label": label}
    if verdict.stopped:
        return {"best_step": verdict.best_step, "stop_step": verdict.stop_step,
                "label": "rule fired, not stopped (never_stop)"}
    return {"best_step": verdict.best_step, "stop_step": None, "label": ""}


def live_token(store: Store, job_id: str, tenant: str | None) -> str:
    """A digest of what the live parts of a job page show (the job row with its eval count and
    deliveries, the audit trail's length, the tenant's shadow mode): the page polls with it and
    gets 204 while it is unchanged, so a quiet job costs a few small queries, not a redraw of its
    whole history. NotFound for another tenant's job."""
    job = domain.get_job(store, job_id, tenant)
    seen = [job, len(controls.list_audit(store, job_id, tenant)), listing.tenant_shadow(store, job["tenant"])]
    return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()[:32]
