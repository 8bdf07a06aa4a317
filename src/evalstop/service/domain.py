"""The domain layer: tenants, jobs, overrides and reads. No HTTP here.

``tenant`` arguments scope every job operation: a tenant name, or ``None`` for an operator
(admin) who sees every tenant. A job of another tenant raises :class:`NotFound`, exactly as an
unknown id does. Score ingest lives in :mod:`evalstop.service.ingest` and is re-exported here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..detectors import (
    DEFAULT_CADENCE,
    DEFAULT_SPEC,
    CadencePolicy,
    Detector,
    Monitor,
    OnDetect,
    format_cadence,
    format_spec,
    parse_cadence,
    parse_spec,
)
from . import lifecycle
from . import resubmit as resubmitting
from . import rewind as rewinding
from . import scopes as scoping
from .actors import Actor, record
from .adapters._base import JobRef
from .errors import Conflict, Forbidden, InvalidInput, NotFound
from .fairness import Limits as FairLimits
from .fairness import Quota, QuotaExceeded, effective
from .ingest import IngestResult, decide_stop, ingest_scores, ingest_scores_async
from .monitoring import load_monitor, new_monitor_state
from .score import ScoreIn
from .store import Conn, Store
from .store import decision as decision_store
from .store import job as job_store
from .store import rewound as rewound_store
from .store import score as score_store
from .store import tenant as tenant_store

__all__ = [
    "RULE_MAX_WINDOW", "IngestResult", "JobSpec", "ScoreIn", "check_rule_cost", "create_tenant", "get_job",
    "ingest_scores", "ingest_scores_async",
    "list_decisions",
    "list_jobs", "list_scores", "list_tenants", "register_job", "set_job_shadow", "set_override",
    "set_tenant_shadow", "tenant_for_token",
]

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
OVERRIDES = ("never_stop", "stop_now")
#: The default of the service setting ``rule_max_window``: the most a job's rule may give a
#: parameter that sizes its state or its work per eval (:mod:`.limits`).
RULE_MAX_WINDOW = 256


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
    tenant_store.create(store, row)
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
    tenant_store.update(store, name, **values)
    return _tenant(store, name)


def tenant_policy(store: Store, name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(scope, quota)`` of a tenant as stored."""
    scope, quota = tenant_store.policy(store, name)
    return scope, quota


def tenant_for_token(store: Store, token: str) -> str | None:
    """The tenant whose token this is, or None. Compares hashes in constant time."""
    return tenant_store.for_token_hash(store, hash_token(token), store.clock())


def list_tenants(store: Store) -> list[dict[str, Any]]:
    return tenant_store.list_all(store)


def set_tenant_shadow(store: Store, name: str, enabled: bool) -> dict[str, Any]:
    """Turn a tenant's shadow mode on or off; returns the tenant (a ``TenantOut``)."""
    tenant_store.update(store, name, shadow=enabled)
    return _tenant(store, name)


def _tenant(store: Store, name: str) -> dict[str, Any]:
    """Tenant ``name`` as :func:`list_tenants` shows it (the caller has just found it)."""
    return next(t for t in list_tenants(store) if t["name"] == name)


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
    cadence: str = DEFAULT_CADENCE
    eval_interval: int | None = None
    #: the on-detect policy's fields; None: the tenant's default (``service/rewind.py``)
    on_detect: str | None = None
    max_rewinds: int | None = None
    correction: str | None = None
    #: how a rewind resubmits the job on its engine (``service/resubmit.py``); None: in place
    resubmit: Mapping[str, Any] | None = None


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


def check_rule_cost(detector: Detector, max_window: int) -> None:
    """Raise InvalidInput naming the first parameter of ``detector`` over ``max_window``
    (``Detector.size_params``; :mod:`.limits` says why)."""
    for param in detector.size_params:
        value = getattr(detector, param)
        if value > max_window:
            raise InvalidInput(
                f"detector: {detector.name} {param}={value} is over the service's limit of {max_window} "
                f"(setting rule_max_window, EVALSTOP_RULE_MAX_WINDOW).")


def resolve_cadence(spec: str, eval_interval: int | None = None) -> CadencePolicy:
    """Parse a job's eval cadence spec (``every:3``, ``adaptive:every=3,dense=1``) and check its
    ``eval_interval`` (steps between eval opportunities: an int >= 1, or None if unknown)."""
    if eval_interval is not None and (type(eval_interval) is not int or eval_interval < 1):
        raise InvalidInput(f"eval_interval must be an int >= 1 (or null). Got {eval_interval!r} instead.")
    try:
        return parse_cadence(spec)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"cadence: {exc}") from None


def register_job(
    store: Store, tenant: str, spec: JobSpec, check_target: Callable[[str], None] = lambda _: None, *,
    target_settings: Mapping[str, Any] | None = None, default_limits: FairLimits | None = None,
    check_owner: Callable[[str, JobRef], None] | None = None, rule_max_window: int = RULE_MAX_WINDOW,
    max_rewinds: int = rewinding.MAX_REWINDS, check_resubmit: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """Register a job for ``tenant``. ``check_target`` raises InvalidInput for an unknown target;
    the reference must lie in the tenant's scope (:mod:`.scopes`), and ``check_owner`` (the
    service passes ``AdapterRegistry.check_registration``) asks the backend whether the job is
    the tenant's, before any lock is taken; the reference must belong to no other live job of
    the same tenant (references are per tenant, so nothing here tells a tenant what others
    registered); the tenant's ``max_live_jobs`` quota must not be used up. ``target_settings``
    are the service's settings of the job's target (its backend may check the job against them:
    the webhook's configured URL, when the job names none).
    ``rule_max_window`` bounds the rule's size parameters (:func:`check_rule_cost`; the
    service passes its setting), checked before the backend is asked anything. The job's
    on-detect policy is its own fields over the tenant's default (``max_rewinds``: the
    operator's limit). The record returned carries ``next_eval``: the fresh monitor's hint, when
    the job's first eval is worth running (as the score reply's ``next_eval`` says for each
    later one). With ``check_owner``, a job with a resubmission template is also put to
    ``check_resubmit(target, tenant)`` (``AdapterRegistry.check_resubmit``: the adapter's
    settings must let it resubmit as the tenant)."""
    _check_name("target", spec.target)
    check_target(spec.target)
    detector = resolve_detector(spec.detector, spec.mode)
    check_rule_cost(detector, rule_max_window)
    cadence = resolve_cadence(spec.cadence, spec.eval_interval)
    external_ref = scoping.canonical_ref(spec.target, spec.external_ref)
    job_id = uuid.uuid4().hex
    if check_owner is not None:  # the cheap checks first: nothing asks the backend for a bad request
        scope = tenant_store.policy(store, tenant)[0]
        scoping.check_registration(tenant, scoping.parse_scope(scope), spec.target, external_ref,
                                   spec.target_options, target_settings or {})
        if spec.resubmit is not None:
            with store.reading() as conn:
                policy = _job_policy(conn, tenant, spec, max_rewinds)
            resubmit_template(spec, policy, scoping.parse_scope(scope), tenant)
            if check_resubmit is not None:
                check_resubmit(spec.target, tenant)
        ref = JobRef(job_id, tenant, external_ref, dict(spec.target_options), scope=scope or {})
        check_owner(spec.target, ref)
    row = {
        "id": job_id, "tenant": tenant, "name": spec.name or job_id, "external_ref": external_ref,
        "target": spec.target, "target_options": dict(spec.target_options),
        "detector": format_spec(detector), "metric": spec.metric, "mode": spec.mode,
        "grace_period_s": spec.grace_period_s, "gpus": spec.gpus,
        "expected_duration_s": spec.expected_duration_s, "shadow": spec.shadow, "override": None,
        "state": lifecycle.INITIAL, "created_at": store.clock(), "stopped_at": None,
        "cadence": format_cadence(cadence), "eval_interval": spec.eval_interval,
    }
    with store.transaction() as conn:
        owner = job_store.lock_owner(conn, tenant)  # registrations of one tenant serialise here
        if owner is None:
            raise NotFound(f"Tenant {tenant!r} not found.")
        scope, quota = owner
        policy = _job_policy(conn, tenant, spec, max_rewinds)
        row.update(on_detect=policy.to_json(),
                   monitor_state=new_monitor_state(detector, cadence, spec.eval_interval, policy),
                   resubmit=resubmit_template(spec, policy, scoping.parse_scope(scope), tenant))
        scoping.check_registration(tenant, scoping.parse_scope(scope), spec.target, external_ref,
                                   spec.target_options, target_settings or {})
        _check_live_quota(conn, tenant, effective(quota, default_limits or UNLIMITED))
        _check_ref_free(conn, tenant, spec.target, external_ref)
        if not job_store.insert(conn, row):  # cannot happen: registrations of one tenant serialise
            raise Conflict(f"external_ref: {spec.target} job {external_ref!r} was registered meanwhile.")
    first = Monitor.from_json(row["monitor_state"], detector).next_eval()  # the fresh monitor's hint
    return {**get_job(store, job_id, tenant), "next_eval": first.to_dict()}


UNLIMITED = FairLimits(scores_per_s=float("inf"), burst=2**62, max_live_jobs=2**62)


def _check_live_quota(conn: Conn, tenant: str, limits: FairLimits) -> None:
    live = job_store.count_live(conn, tenant)
    if live >= limits.max_live_jobs:
        raise QuotaExceeded(f"Tenant {tenant!r} has {live} live jobs, its quota (max_live_jobs="
                            f"{limits.max_live_jobs}); retry once one has stopped.")


def _check_ref_free(conn: Conn, tenant: str, target: str, ref: str) -> None:
    """A clear message before the unique index says no. It speaks only of the tenant's own jobs:
    the index is per tenant, so another tenant's use of a reference is never visible here."""
    holder = job_store.live_holder(conn, tenant, target, ref)
    if holder is not None:
        raise Conflict(f"external_ref: {target} job {ref!r} already belongs to your live job {holder}; a "
                       f"reference belongs to one live job of a tenant.")


def get_job(store: Store, job_id: str, tenant: str | None) -> dict[str, Any]:
    return job_store.get(store, job_id, tenant)


def list_jobs(store: Store, tenant: str | None, *, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
    return job_store.list_all(store, tenant, limit=limit, offset=offset)


def list_scores(
    store: Store, job_id: str, tenant: str | None, *, metric: str | None = None,
    after_step: int = -1, limit: int = 1000,
) -> list[dict[str, Any]]:
    return score_store.list_after(store, job_id, tenant, metric=metric, after_step=after_step, limit=limit)


def list_decisions(store: Store, job_id: str, tenant: str | None) -> list[dict[str, Any]]:
    return decision_store.list_for(store, job_id, tenant)


def set_job_shadow(
    store: Store, job_id: str, tenant: str | None, enabled: bool, *, actor: Actor | None = None,
    reason: str = "",
) -> dict[str, Any]:
    """Turn the job's shadow mode on or off; a change adds an audit row (``shadow_on`` or
    ``shadow_off``) in the same transaction, a call that changes nothing adds none."""
    actor = actor or Actor(tenant)
    with store.transaction() as conn:
        job = job_store.lock(conn, job_id, tenant)
        if bool(job["shadow"]) != enabled:
            job_store.update(conn, job_id, shadow=enabled)
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
        job = job_store.lock(conn, job_id, tenant)
        if override == "never_stop" and job["state"] != lifecycle.RUNNING:
            raise Conflict(f"Job {job_id} is already {job['state']}; never_stop cannot undo a stop.")
        if override == "stop_now" and job["state"] == lifecycle.RUNNING:
            monitor = load_monitor(conn, job, store.limits.max_history)
            latest = job_store.latest_step(conn, job_id, job["metric"])
            why = f"stop_now override by {actor.display}" + (f": {reason}" if reason else "")
            decide_stop(conn, job, "override", monitor, store.clock(), shadow=False, step=latest,
                        reason=why[:1000])
        if override != "stop_now" or job["state"] == lifecycle.RUNNING:
            job_store.update(conn, job_id, override=override)
        record(conn, job_id, actor, override or "resume", reason, store.clock())
    return get_job(store, job_id, tenant)


def _job_policy(conn: Conn, tenant: str, spec: JobSpec, max_rewinds: int) -> OnDetect:
    """The job's on-detect policy: its own fields over its tenant's stored default."""
    default = rewinding.parse_policy(rewound_store.tenant_default(conn, tenant), 2**31, "tenant on_detect")
    return rewinding.resolve_policy(default, max_rewinds, on_detect=spec.on_detect,
                                    max_rewinds=spec.max_rewinds, correction=spec.correction)


def resubmit_template(
    spec: JobSpec, policy: OnDetect, scope: scoping.TenantScope | None, tenant: str
) -> dict[str, Any] | None:
    """The job's resubmission template, checked against the tenant's scope (None: in place)."""
    if spec.resubmit is None:
        return None
    if not policy.rewinds:
        raise InvalidInput("resubmit: a resubmission template needs on_detect='rewind' with "
                           "max_rewinds >= 1.")
    return resubmitting.check_template(spec.target, spec.resubmit, scope, tenant)


def set_tenant_on_detect(
    store: Store, name: str, policy: Mapping[str, Any] | None, limit: int
) -> dict[str, Any]:
    """Set a tenant's default on-detect policy (None: stop); returns it as stored."""
    parsed = rewinding.parse_policy(policy, limit)
    stored = None if parsed is None else parsed.to_json()
    tenant_store.update(store, name, on_detect=stored)
    return {"tenant": name, "on_detect": stored}


def tenant_on_detect(store: Store, name: str, caller: str | None) -> dict[str, Any]:
    """A tenant's default on-detect policy: for an operator, or for the tenant itself."""
    if caller is not None and caller != name:
        raise NotFound(f"Tenant {name!r} not found.")
    with store.reading() as conn:
        stored = rewound_store.tenant_default(conn, name)
    return {"tenant": name, "on_detect": stored}


def _check_name(what: str, name: str) -> None:
    if not NAME_RE.match(name):
        raise InvalidInput(
            f"{what} name must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit. Got {name!r} instead."
        )


def require_admin(tenant: str | None, action: str) -> None:
    if tenant is not None:
        raise Forbidden(f"Only an operator (admin token) can {action}.")
