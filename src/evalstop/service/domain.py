"""The domain layer: tenants, jobs, overrides and reads. No HTTP here.

``tenant`` arguments scope every job operation: a tenant name, or ``None`` for an operator
(admin) who sees every tenant. A job of another tenant raises :class:`NotFound`, exactly as an
unknown id does. Score ingest lives in :mod:`evalstop.service.ingest` and is re-exported here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from ..detectors import DEFAULT_SPEC, Detector, parse_spec
from .errors import Conflict, Forbidden, InvalidInput, NotFound
from .ingest import (
    IngestResult,
    ScoreIn,
    decide_stop,
    ingest_scores,
    ingest_scores_async,
    lock_job,
)
from .monitoring import load_monitor, new_monitor_state
from .store import Store, decisions, jobs, outbox, scores, tenants

__all__ = [
    "IngestResult", "JobSpec", "ScoreIn", "create_tenant", "get_job", "ingest_scores", "ingest_scores_async",
    "list_decisions",
    "list_jobs", "list_scores", "list_tenants", "register_job", "set_job_shadow", "set_override",
    "set_tenant_shadow", "tenant_for_token",
]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
OVERRIDES = ("never_stop", "stop_now")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_tenant(store: Store, name: str, *, shadow: bool = False) -> tuple[dict[str, Any], str]:
    """Create tenant ``name``; return its record and its API token (shown once, stored hashed)."""
    _check_name("tenant", name)
    token = "es_" + secrets.token_urlsafe(32)
    row = {"name": name, "token_hash": hash_token(token), "shadow": shadow, "created_at": store.clock()}
    with store.transaction() as conn:
        if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == name)).first():
            raise Conflict(f"Tenant {name!r} already exists.")
        conn.execute(tenants.insert().values(**row))
    return {"name": name, "shadow": shadow, "created_at": row["created_at"]}, token


def tenant_for_token(store: Store, token: str) -> str | None:
    """The tenant whose token this is, or None. Compares hashes in constant time."""
    digest = hash_token(token)
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(tenants.c.name, tenants.c.token_hash)
                           .where(tenants.c.token_hash == digest)).first()
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        return None
    return str(row.name)


def list_tenants(store: Store) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(tenants.c.name, tenants.c.shadow, tenants.c.created_at)
                            .order_by(tenants.c.name)).mappings().all()
    return [dict(r) for r in rows]


def set_tenant_shadow(store: Store, name: str, enabled: bool) -> dict[str, Any]:
    with store.transaction() as conn:
        done = conn.execute(tenants.update().where(tenants.c.name == name).values(shadow=enabled))
        if done.rowcount == 0:
            raise NotFound(f"Tenant {name!r} not found.")
    return {"name": name, "shadow": enabled}


@dataclass(frozen=True)
class JobSpec:
    """What a registration says about a job (validated by :func:`register_job`)."""

    external_ref: str
    target: str
    name: str = ""
    target_options: Mapping[str, Any] = field(default_factory=dict)
    detector: str = DEFAULT_SPEC
    metric: str = "score"
    mode: str = "max"
    grace_period_s: float = 60.0
    gpus: int = 1
    expected_duration_s: float | None = None
    shadow: bool = False


def resolve_detector(spec: str, mode: str) -> Detector:
    """Parse ``spec`` and give it the registration's ``mode``; a spec naming another mode is an
    error (one job cannot maximise and minimise its metric)."""
    if mode not in ("max", "min"):
        raise InvalidInput(f"mode must be 'max' or 'min'. Got {mode!r} instead.")
    try:
        detector = parse_spec(spec)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"detector: {exc}") from None
    explicit = any(p.partition("=")[0].strip() == "mode" for p in spec.partition(":")[2].split(","))
    current = getattr(detector, "mode", mode)
    if current != mode:
        if explicit:
            raise InvalidInput(f"detector spec {spec!r} has mode={current} but the job's mode is {mode!r}.")
        detector = dataclasses.replace(detector, mode=mode)  # type: ignore[type-var]
    return detector


def register_job(
    store: Store, tenant: str, spec: JobSpec, check_target: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Register a job for ``tenant``. ``check_target`` raises InvalidInput for an unknown target."""
    from ..detectors import format_spec

    _check_name("target", spec.target)
    check_target(spec.target)
    detector = resolve_detector(spec.detector, spec.mode)
    job_id = uuid.uuid4().hex
    row = {
        "id": job_id, "tenant": tenant, "name": spec.name or job_id, "external_ref": spec.external_ref,
        "target": spec.target, "target_options": dict(spec.target_options),
        "detector": format_spec(detector), "metric": spec.metric, "mode": spec.mode,
        "grace_period_s": spec.grace_period_s, "gpus": spec.gpus,
        "expected_duration_s": spec.expected_duration_s, "shadow": spec.shadow, "override": None,
        "state": "running", "created_at": store.clock(), "stopped_at": None,
        "monitor_state": new_monitor_state(detector),
    }
    with store.transaction() as conn:
        if not conn.execute(sa.select(tenants.c.name).where(tenants.c.name == tenant)).first():
            raise NotFound(f"Tenant {tenant!r} not found.")
        conn.execute(jobs.insert().values(**row))
    return get_job(store, job_id, tenant)


def get_job(store: Store, job_id: str, tenant: str | None) -> dict[str, Any]:
    with store.engine.connect() as conn:
        job = _job_row(conn, job_id, tenant)
        stats = conn.execute(
            sa.select(sa.func.count(), sa.func.max(scores.c.step))
            .where(scores.c.job_id == job_id, scores.c.metric == job["metric"])
        ).one()
        delivery = conn.execute(
            sa.select(outbox.c.phase, outbox.c.attempts, outbox.c.last_error, outbox.c.delivered_at)
            .where(outbox.c.job_id == job_id).order_by(outbox.c.id)
        ).mappings().all()
    return {**job, "n_evals": int(stats[0]), "last_step": stats[1],
            "deliveries": [dict(d) for d in delivery]}


def list_jobs(store: Store, tenant: str | None, *, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
    query = sa.select(jobs).order_by(jobs.c.created_at, jobs.c.id).limit(limit).offset(offset)
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    with store.engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings().all()]


def list_scores(
    store: Store, job_id: str, tenant: str | None, *, metric: str | None = None,
    after_step: int = -1, limit: int = 1000,
) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        job = _job_row(conn, job_id, tenant)
        cols = [scores.c[n] for n in ("metric", "step", "value", "checkpoint_uri", "progress", "loss",
                                      "ts", "received_at")]
        query = (sa.select(*cols)
                 .where(scores.c.job_id == job_id, scores.c.metric == (metric or job["metric"]),
                        scores.c.step > after_step)
                 .order_by(scores.c.step).limit(limit))
        return [dict(r) for r in conn.execute(query).mappings().all()]


def list_decisions(store: Store, job_id: str, tenant: str | None) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        _job_row(conn, job_id, tenant)
        query = sa.select(decisions).where(decisions.c.job_id == job_id).order_by(decisions.c.id)
        return [dict(r) for r in conn.execute(query).mappings().all()]


def set_job_shadow(store: Store, job_id: str, tenant: str | None, enabled: bool) -> dict[str, Any]:
    with store.transaction() as conn:
        lock_job(conn, job_id, tenant)
        conn.execute(jobs.update().where(jobs.c.id == job_id).values(shadow=enabled))
    return get_job(store, job_id, tenant)


def set_override(store: Store, job_id: str, tenant: str | None, override: str | None) -> dict[str, Any]:
    """``never_stop``: the rule may fire but nothing is decided (refused once a stop is under way).
    ``stop_now``: decide a stop at once, enforced even in shadow mode (a person asked for it);
    idempotent. ``None``: clear ``never_stop``; if the rule has fired, the next score decides."""
    if override is not None and override not in OVERRIDES:
        raise InvalidInput(
            f"override must be one of {', '.join(OVERRIDES)} or null. Got {override!r} instead.")
    with store.transaction() as conn:
        job = lock_job(conn, job_id, tenant)
        if override == "never_stop" and job["state"] != "running":
            raise Conflict(f"Job {job_id} is already {job['state']}; never_stop cannot undo a stop.")
        if override == "stop_now" and job["state"] == "running":
            monitor = load_monitor(conn, job, store.limits.max_history)
            latest = conn.execute(sa.select(sa.func.max(scores.c.step)).where(
                scores.c.job_id == job_id, scores.c.metric == job["metric"])).scalar()
            decide_stop(conn, job, "override", monitor, store.clock(), shadow=False, step=latest,
                        reason=f"stop_now override by {'operator' if tenant is None else 'tenant'}")
        if override != "stop_now" or job["state"] == "running":
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(override=override))
    return get_job(store, job_id, tenant)


def _job_row(conn: Connection, job_id: str, tenant: str | None) -> RowMapping:
    query = sa.select(jobs).where(jobs.c.id == job_id)
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    row = conn.execute(query).mappings().first()
    if row is None:
        raise NotFound(f"Job {job_id!r} not found.")
    return row


def _check_name(what: str, name: str) -> None:
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"{what} name must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit. Got {name!r} instead."
        )


def require_admin(tenant: str | None, action: str) -> None:
    if tenant is not None:
        raise Forbidden(f"Only an operator (admin token) can {action}.")
