"""HTTP routes: authentication, parsing and status codes only; the domain layer does the work."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from dataclasses import dataclass, fields
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from . import controls, domain, phases, reports, tokens
from .context import ServiceContext
from .errors import Forbidden, InvalidInput
from .limits import charge_rule_work, check_options
from .schemas import (
    DecisionOut,
    IngestOut,
    JobIn,
    JobOut,
    JobRegistered,
    OnDetectIn,
    OnDetectOut,
    OverrideIn,
    QuotaIn,
    RetryIn,
    ScopeIn,
    ScoreBatch,
    ScoreIn,
    ScoreOut,
    ScoresBody,
    TenantCreated,
    TenantIn,
    TenantOut,
    Toggle,
    TokenEventOut,
    TokenRevoked,
    TokenRevokeIn,
    TokenRotated,
    TokenRotateIn,
)
from .scopes import checkpoint_allowed
from .store import delivery

MAX_INT = 2**62  # fits SQLite INTEGER and PostgreSQL BIGINT
bearer = HTTPBearer(auto_error=False, description="A tenant's API token, or the operator (admin) token.")


@dataclass(frozen=True)
class Principal:
    """Who calls: an operator (``tenant`` None, sees everything) or one tenant."""

    tenant: str | None

    @property
    def admin(self) -> bool:
        return self.tenant is None


async def get_ctx(request: Request) -> ServiceContext:
    ctx: ServiceContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ServiceContext, Depends(get_ctx)]


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


UNAUTHORIZED = "Missing or invalid API token: send 'Authorization: Bearer <token>'."


def known_principal(ctx: ServiceContext, token: str) -> Principal | None:
    """The caller of ``token`` if it is the admin token or a tenant token this replica checked
    within ``token_cache_s``, else None (look the token up in the database then). No database
    read here: the fast path calls this on the event loop for every score."""
    admin = ctx.settings.admin_token
    if admin is not None and hmac.compare_digest(token.encode(), admin.get_secret_value().encode()):
        return Principal(None)
    tenant = ctx.tokens.get(token)
    return None if tenant is None else Principal(tenant)


async def get_principal(ctx: Ctx, creds: Credentials) -> Principal:
    unauthorized = HTTPException(401, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
    if creds is None or not creds.credentials:
        raise unauthorized
    known = known_principal(ctx, creds.credentials)
    if known is not None:
        return known
    tenant = await run_in_threadpool(ctx.tokens.load, ctx.store, creds.credentials)
    if tenant is None:
        raise unauthorized
    return Principal(tenant)


Caller = Annotated[Principal, Depends(get_principal)]
router = APIRouter(prefix="/v1")


@router.post("/tenants", status_code=201, response_model=TenantCreated, tags=["operators"])
def create_tenant(body: TenantIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    domain.require_admin(who.tenant, "create tenants")
    record, token = domain.create_tenant(
        ctx.store, body.name, shadow=body.shadow,
        scope=None if body.scope is None else body.scope.model_dump(exclude_none=True),
        quota=None if body.quota is None else body.quota.model_dump(exclude_none=True))
    return {**record, "token": token}


@router.put("/tenants/{name}/scope", response_model=TenantOut, tags=["operators"])
def set_tenant_scope(name: str, body: ScopeIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """Declare what the tenant may act on (replaces the previous scope; null: nothing)."""
    domain.require_admin(who.tenant, "change a tenant's scope")
    scope = None if body.scope is None else body.scope.model_dump(exclude_none=True)
    changed = domain.set_tenant_policy(ctx.store, name, scope=scope)
    ctx.forget_tenant(name)  # this replica at once; the others when they hear (revocation.py)
    return changed


@router.put("/tenants/{name}/quota", response_model=TenantOut, tags=["operators"])
def set_tenant_quota(name: str, body: QuotaIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """Override the default rate limit and size quota for one tenant (null: the defaults)."""
    domain.require_admin(who.tenant, "change a tenant's quota")
    quota = None if body.quota is None else body.quota.model_dump(exclude_none=True)
    changed = domain.set_tenant_policy(ctx.store, name, quota=quota)
    ctx.forget_tenant(name)
    return changed


@router.put("/tenants/{name}/on_detect", response_model=OnDetectOut, tags=["operators"])
def set_tenant_on_detect(name: str, body: OnDetectIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """Set the tenant's default on-detect policy (null: stop), for jobs that name none."""
    domain.require_admin(who.tenant, "change a tenant's default on-detect policy")
    return domain.set_tenant_on_detect(ctx.store, name, body.on_detect, ctx.settings.max_rewinds)


@router.get("/tenants/{name}/on_detect", response_model=OnDetectOut, tags=["tenants"])
def get_tenant_on_detect(name: str, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """The tenant's default on-detect policy (an operator, or the tenant itself)."""
    return domain.tenant_on_detect(ctx.store, name, who.tenant)


@router.get("/tenants", response_model=list[TenantOut], tags=["operators"])
def list_tenants(ctx: Ctx, who: Caller) -> list[dict[str, Any]]:
    domain.require_admin(who.tenant, "list tenants")
    return domain.list_tenants(ctx.store)


@router.put("/tenants/{name}/shadow", response_model=TenantOut, tags=["operators"])
def set_tenant_shadow(name: str, body: Toggle, ctx: Ctx, who: Caller) -> dict[str, Any]:
    domain.require_admin(who.tenant, "change a tenant's shadow mode")
    return domain.set_tenant_shadow(ctx.store, name, body.enabled)


# -- tokens: rotate, revoke, their audit (service/tokens.py; docs/service.md "Tokens") -----------
@router.post("/tenants/{name}/token/rotate", response_model=TokenRotated, tags=["tokens"])
def rotate_token(name: str, body: TokenRotateIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """A new token for tenant ``name`` (an operator: any tenant; a tenant: itself), shown once.
    The replaced token stays valid ``grace_s`` seconds; the tenant's console sessions end."""
    actor = controls.Actor(who.tenant)
    done = tokens.rotate(ctx.store, name, actor, grace_s=body.grace_s, reason=body.reason)
    ctx.tokens.forget_tenant(name)  # this replica at once; the others when they hear (revocation.py)
    return done


@router.post("/tenants/{name}/token/revoke", response_model=TokenRevoked, tags=["tokens"])
def revoke_token(name: str, body: TokenRevokeIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """Make tenant ``name``'s token invalid (an operator: any tenant; a tenant: itself); only an
    operator's rotation gives it a token again. The tenant's console sessions end."""
    done = tokens.revoke(ctx.store, name, controls.Actor(who.tenant), reason=body.reason)
    ctx.tokens.forget_tenant(name)
    return done


@router.get("/tenants/{name}/token/audit", response_model=list[TokenEventOut], tags=["tokens"])
def token_audit(name: str, ctx: Ctx, who: Caller) -> list[dict[str, Any]]:
    """Who rotated or revoked the tenant's token, or signed out of its console sessions, when, why."""
    return tokens.history(ctx.store, name, controls.Actor(who.tenant))


@router.post("/jobs", status_code=201, response_model=JobRegistered, tags=["jobs"])
def register_job(body: JobIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    owner = body.tenant or who.tenant
    if owner is None:
        raise HTTPException(422, "tenant: operators must name the tenant that owns the job.")
    if who.tenant is not None and owner != who.tenant:
        raise Forbidden(f"A token of tenant {who.tenant!r} cannot register jobs for tenant {owner!r}.")
    check_options("target_options", body.target_options, ctx.settings.max_options_bytes)
    check_options("resubmit", body.resubmit, ctx.settings.max_options_bytes)
    spec = domain.JobSpec(**body.model_dump(exclude={"tenant"}))
    return domain.register_job(ctx.store, owner, spec, ctx.adapters.check,
                               target_settings=ctx.settings.adapter_settings.get(spec.target, {}),
                               default_limits=ctx.policies.defaults,
                               check_owner=ctx.adapters.check_registration,
                               check_resubmit=ctx.adapters.check_resubmit,
                               max_rewinds=ctx.settings.max_rewinds,
                               rule_max_window=ctx.settings.rule_max_window)


@router.get("/jobs", response_model=list[JobOut], tags=["jobs"])
def list_jobs(
    ctx: Ctx, who: Caller, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
) -> list[dict[str, Any]]:
    return domain.list_jobs(ctx.store, who.tenant, limit=limit, offset=offset)


@router.get("/jobs/{job_id}", response_model=JobOut, tags=["jobs"])
def get_job(job_id: str, ctx: Ctx, who: Caller) -> dict[str, Any]:
    return domain.get_job(ctx.store, job_id, who.tenant)


@router.post("/jobs/{job_id}/scores", response_model=IngestOut, tags=["scores"])
async def post_scores(job_id: str, body: ScoresBody, ctx: Ctx, who: Caller) -> Response:
    """The hot path: async, so the request waits for its group commit without a thread of its
    own, and the reply is serialised once here (an IngestResult needs no output validation)."""
    return await ingest_reply(ctx, job_id, who, body)


async def ingest_reply(
    ctx: ServiceContext, job_id: str, who: Principal, body: ScoreIn | ScoreBatch
) -> Response:
    """Ingest a validated scores body and build the reply (this route and :mod:`.fastpath`)."""
    items = body.scores if isinstance(body, ScoreBatch) else [body]
    if who.tenant is not None:
        await _admit(ctx, who.tenant, items)
    started = time.perf_counter()
    try:
        result = await domain.ingest_scores_async(ctx.store, job_id, who.tenant, items)
    except (ArithmeticError, ValueError):  # the job's rule raised on these scores: a bug, counted
        ctx.metrics.rule_errors.inc()
        raise
    ctx.metrics.ingest_latency.observe(time.perf_counter() - started)
    phases.note("rule_ms", round(1000 * result.rule_cpu_s, 3))  # the benchmark's phase log, if on
    ctx.metrics.scores_ingested.inc(result.accepted)
    if result.decided_now:
        ctx.metrics.decisions.labels(source="detector", shadow=str(result.shadow_stop).lower()).inc()
    if who.tenant is not None:
        charge_rule_work(ctx, who.tenant, len(items), result.rule_cpu_s)
    reply = {name: getattr(result, name) for name in INGEST_FIELDS}
    return Response(_json(reply), media_type="application/json")


async def _admit(ctx: ServiceContext, tenant: str, items: list[ScoreIn]) -> None:
    """The tenant's rate limit (429 with Retry-After) and checkpoint scope, before any work."""
    policy = ctx.policies.cached(tenant)
    if policy is None:
        policy = await asyncio.to_thread(ctx.policies.load, tenant)
    if not ctx.buckets.take_local(tenant, len(items), policy.limits):  # a shared bucket's lease ran out
        await asyncio.to_thread(ctx.buckets.take, tenant, len(items), policy.limits)
    prefixes = policy.scope.checkpoint_prefixes if policy.scope is not None else []
    if not prefixes:
        return  # no declared roots: the URI is stored as evidence, never pinned on a filesystem
    for i, item in enumerate(items):
        if item.checkpoint_uri is not None and not checkpoint_allowed(item.checkpoint_uri, prefixes):
            raise InvalidInput(f"scores[{i}].checkpoint_uri {item.checkpoint_uri!r} is outside tenant "
                               f"{tenant!r}'s checkpoint prefixes {prefixes}.")


INGEST_FIELDS = tuple(f.name for f in fields(domain.IngestResult) if f.name != "rule_cpu_s")


def _json(content: Any) -> bytes:
    """The bytes JSONResponse would send (compact, UTF-8, no NaN)."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


@router.get("/jobs/{job_id}/scores", response_model=list[ScoreOut], tags=["scores"])
def list_scores(
    job_id: str, ctx: Ctx, who: Caller, metric: Annotated[str | None, Query(max_length=200)] = None,
    after_step: Annotated[int, Query(ge=-1, le=MAX_INT)] = -1,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[dict[str, Any]]:
    return domain.list_scores(ctx.store, job_id, who.tenant, metric=metric, after_step=after_step,
                              limit=limit)


@router.get("/jobs/{job_id}/decisions", response_model=list[DecisionOut], tags=["decisions"])
def list_decisions(job_id: str, ctx: Ctx, who: Caller) -> list[dict[str, Any]]:
    return domain.list_decisions(ctx.store, job_id, who.tenant)


@router.put("/jobs/{job_id}/override", response_model=JobOut, tags=["decisions"])
def set_override(job_id: str, body: OverrideIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    before = domain.get_job(ctx.store, job_id, who.tenant)["state"]
    job = domain.set_override(ctx.store, job_id, who.tenant, body.override, reason=body.reason)
    if body.override == "stop_now" and before == "running":
        ctx.metrics.decisions.labels(source="override", shadow="false").inc()
    return job


@router.put("/jobs/{job_id}/shadow", response_model=JobOut, tags=["decisions"])
def set_job_shadow(job_id: str, body: Toggle, ctx: Ctx, who: Caller) -> dict[str, Any]:
    return domain.set_job_shadow(ctx.store, job_id, who.tenant, body.enabled)


@router.post("/jobs/{job_id}/retry-stop", response_model=JobOut, tags=["decisions"])
def retry_stop(job_id: str, body: RetryIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """Put a failed stop (``stop_failed``) back in the outbox; recorded in the audit trail."""
    return controls.retry_stop(ctx.store, job_id, controls.Actor(who.tenant), body.reason)


@router.post("/jobs/{job_id}/release", response_model=JobOut, tags=["decisions"])
def release(job_id: str, body: RetryIn, ctx: Ctx, who: Caller) -> dict[str, Any]:
    """Close a job whose stop failed for good (``stop_failed`` -> ``stopped``), freeing its
    external reference; recorded in the audit trail."""
    return controls.release(ctx.store, job_id, controls.Actor(who.tenant), body.reason)


@router.get("/jobs/{job_id}/audit", tags=["decisions"])
def list_audit(job_id: str, ctx: Ctx, who: Caller) -> list[dict[str, Any]]:
    """Who changed the job by hand (overrides, stop retries), when, why, through what."""
    return controls.list_audit(ctx.store, job_id, who.tenant)


@router.get("/jobs/{job_id}/delivery-history", tags=["decisions"])
def delivery_history(job_id: str, ctx: Ctx, who: Caller) -> list[dict[str, Any]]:
    """Each phase the job's stop entered and each failed attempt with its error."""
    return controls.delivery_history(ctx.store, job_id, who.tenant)


@router.get("/reports/shadow", tags=["reports"])
def shadow_report(ctx: Ctx, who: Caller) -> list[dict[str, Any]]:
    """Per tenant: jobs shadow mode would have stopped and the GPU-hours that saves (docs/metrics.md)."""
    return reports.shadow_summary(ctx.store, who.tenant)


@router.get("/reports/reclaimed", tags=["reports"])
def reclaimed_report(ctx: Ctx, who: Caller) -> list[dict[str, Any]]:
    """Per tenant: GPU-hours reclaimed by enforced stops, with the cumulative series over time."""
    return reports.reclaimed(ctx.store, who.tenant)


ops = APIRouter(tags=["operations"])


@ops.get("/healthz")
def healthz() -> dict[str, str]:
    """The process answers."""
    return {"status": "ok"}


@ops.get("/readyz")
def readyz(ctx: Ctx, response: Response) -> dict[str, Any]:
    """The database answers and, if enabled, the outbox worker runs."""
    checks: dict[str, str] = {}
    try:
        ctx.store.ping()
        checks["database"] = "ok"
    except Exception as exc:  # any failure means not ready; say which kind, never the URL
        checks["database"] = f"unavailable ({type(exc).__name__})"
    if ctx.settings.run_worker:
        checks["worker"] = "ok" if ctx.worker.alive else "not running"
    ready = all(v == "ok" for v in checks.values())
    response.status_code = 200 if ready else 503
    return {"status": "ready" if ready else "not ready", "checks": checks}


@ops.get("/metrics", response_class=Response)
def metrics(ctx: Ctx) -> Response:
    """Prometheus text exposition (the outbox backlog read from the store, cached a few seconds)."""
    ctx.metrics.refresh_outbox(partial(delivery.pending_count, ctx.store))
    return Response(ctx.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
