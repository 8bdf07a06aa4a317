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
from . import scopes as scoping
from .controls import Actor, record
from .errors import Conflict, Forbidden, InvalidInput, NotFound
from .fairness import Limits as FairLimits
from .fairness import Quota, QuotaExceeded, effective
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


def create_tenant(
    store: Store, name: str, *, shadow: bool = False, scope: Mapping[str, Any] | None = None,
    quota: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], str]:
    """Create tenant ``name``; return its record and its API token (shown once, stored hashed).
    ``scope`` (:class:`~.scopes.TenantScope`) says what it may act on; None: nothing."""
    _check_name("tenant", name)
    scope_json = _scope_json(scope)
    quota_json = _quota_json(quota)
    token = "es_" + secrets.token_urlsafe(32)
    row = {"name": name, "token_hash": hash_token(token), "shadow": shadow, "created_at": store.clock(),
           "scope": scope_json, "quota": quota_json}
    with store.transaction() as conn:
        if conn.execute(sa.select(tenants.c.name).where(tenants.c.name == name)).first():
            raise Conflict(f"Tenant {name!r} already exists.")
        conn.execute(tenants.insert().values(**row))
    return {"name": name, "shadow": shadow, "created_at": row["created_at"], "scope": scope_json,
            "quota": quota_json}, token


def _scope_json(scope: Mapping[str, Any] | None) -> dict[str, Any] | None:
    try:
        parsed = scoping.parse_scope(scope)
    except ValueError as exc:
        raise InvalidInput(f"scope: {exc}") from None
    return None if parsed is None else parsed.model_dump(exclude_none=True)


def _quota_json(quota: Mapping[str, Any] | None) -> dict[str, Any] | None:
    try:
        return None if quota is None else Quota.model_validate(quota).model_dump(exclude_none=True)
    except ValueError as exc:
        raise InvalidInput(f"quota: {exc}") from None


def set_tenant_policy(store: Store, name: str, *, scope: Any = ..., quota: Any = ...) -> dict[str, Any]:
    """Replace a tenant's scope and/or quota (``...`` leaves it as it is; None clears it)."""
    values: dict[str, Any] = {}
    if scope is not ...:
        values["scope"] = _scope_json(scope)
    if quota is not ...:
        values["quota"] = _quota_json(quota)
    with store.transaction() as conn:
        done = conn.execute(tenants.update().where(tenants.c.name == name).values(**values))
        if done.rowcount == 0:
            raise NotFound(f"Tenant {name!r} not found.")
    return next(t for t in list_tenants(store) if t["name"] == name)


def tenant_policy(store: Store, name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(scope, quota)`` of a tenant as stored."""
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(tenants.c.scope, tenants.c.quota).where(tenants.c.name == name)).first()
    if row is None:
        raise NotFound(f"Tenant {name!r} not found.")
    return row.scope, row.quota


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
        rows = conn.execute(sa.select(tenants.c.name, tenants.c.shadow, tenants.c.created_at,
                                      tenants.c.scope, tenants.c.quota)
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
    store: Store, tenant: str, spec: JobSpec, check_target: Callable[[str], None] = lambda _: None, *,
    webhook_url: str | None = None, default_limits: FairLimits | None = None,
) -> dict[str, Any]:
    """Register a job for ``tenant``. ``check_target`` raises InvalidInput for an unknown target;
    the reference must lie in the tenant's scope (:mod:`.scopes`) and belong to no other live job;
    the tenant's ``max_live_jobs`` quota must not be used up. ``webhook_url`` is the webhook
    adapter's configured URL (checked against the scope when the job names none)."""
    from ..detectors import format_spec

    _check_name("target", spec.target)
    check_target(spec.target)
    detector = resolve_detector(spec.detector, spec.mode)
    external_ref = scoping.canonical_ref(spec.target, spec.external_ref)
    job_id = uuid.uuid4().hex
    row = {
        "id": job_id, "tenant": tenant, "name": spec.name or job_id, "external_ref": external_ref,
        "target": spec.target, "target_options": dict(spec.target_options),
        "detector": format_spec(detector), "metric": spec.metric, "mode": spec.mode,
        "grace_period_s": spec.grace_period_s, "gpus": spec.gpus,
        "expected_duration_s": spec.expected_duration_s, "shadow": spec.shadow, "override": None,
        "state": "running", "created_at": store.clock(), "stopped_at": None,
        "monitor_state": new_monitor_state(detector),
    }
    with store.transaction() as conn:
        owner = conn.execute(sa.select(tenants.c.scope, tenants.c.quota).where(tenants.c.name == tenant)
                             .with_for_update()).first()  # registrations of one tenant serialise here
        if owner is None:
            raise NotFound(f"Tenant {tenant!r} not found.")
        scoping.check_registration(tenant, scoping.parse_scope(owner.scope), spec.target, external_ref,
                                   spec.target_options, webhook_url)
        _check_live_quota(conn, tenant, effective(owner.quota, default_limits or UNLIMITED))
        _check_ref_free(conn, tenant, spec.target, external_ref)
        try:
            with conn.begin_nested():
                conn.execute(jobs.insert().values(**row))
        except sa.exc.IntegrityError:  # another registration of the same reference won the race
            raise _ref_taken(spec.target, external_ref, None) from None
    return get_job(store, job_id, tenant)


UNLIMITED = FairLimits(scores_per_s=float("inf"), burst=2**62, max_live_jobs=2**62)


def _check_live_quota(conn: Connection, tenant: str, limits: FairLimits) -> None:
    live = conn.execute(sa.select(sa.func.count()).where(jobs.c.tenant == tenant, jobs.c.state != "stopped")
                        ).scalar_one()
    if live >= limits.max_live_jobs:
        raise QuotaExceeded(f"Tenant {tenant!r} has {live} live jobs, its quota (max_live_jobs="
                            f"{limits.max_live_jobs}); retry once one has stopped.")


def _check_ref_free(conn: Connection, tenant: str, target: str, ref: str) -> None:
    """A clear message before the unique index says no (it still decides under a race)."""
    holder = conn.execute(sa.select(jobs.c.id, jobs.c.tenant).where(
        jobs.c.target == target, jobs.c.external_ref == ref, jobs.c.state != "stopped")).first()
    if holder is not None:
        raise _ref_taken(target, ref, holder.id if holder.tenant == tenant else None)


def _ref_taken(target: str, ref: str, own_job: str | None) -> Conflict:
    which = f"your job {own_job}" if own_job else "another live job"
    return Conflict(f"external_ref: {target} job {ref!r} already belongs to {which}; an external reference "
                    f"belongs to one live job only.")


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


def set_job_shadow(
    store: Store, job_id: str, tenant: str | None, enabled: bool, *, actor: Actor | None = None,
    reason: str = "",
) -> dict[str, Any]:
    """Turn the job's shadow mode on or off; a change adds an audit row (``shadow_on`` or
    ``shadow_off``) in the same transaction, a call that changes nothing adds none."""
    actor = actor or Actor(tenant)
    with store.transaction() as conn:
        job = lock_job(conn, job_id, tenant)
        if bool(job["shadow"]) != enabled:
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(shadow=enabled))
            record(conn, job_id, actor, "shadow_on" if enabled else "shadow_off", reason, store.clock())
    return get_job(store, job_id, tenant)


def set_override(
    store: Store, job_id: str, tenant: str | None, override: str | None, *,
    actor: Actor | None = None, reason: str = "",
) -> dict[str, Any]:
    """``never_stop``: the rule may fire but nothing is decided (refused once a stop is under way).
    ``stop_now``: decide a stop at once, enforced even in shadow mode (a person asked for it);
    idempotent. ``None``: clear ``never_stop``; if the rule has fired, the next score decides.
    Each accepted call adds an audit row (``actor``: who, default the caller via the API; ``reason``:
    why) in the same transaction."""
    actor = actor or Actor(tenant)
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
            why = f"stop_now override by {actor.display}" + (f": {reason}" if reason else "")
            decide_stop(conn, job, "override", monitor, store.clock(), shadow=False, step=latest,
                        reason=why[:1000])
        if override != "stop_now" or job["state"] == "running":
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(override=override))
        record(conn, job_id, actor, override or "resume", reason, store.clock())
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
