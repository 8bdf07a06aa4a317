"""The console's pages under ``/ui``: HTTP only; the data comes from :mod:`.data`, the domain
layer and :mod:`evalstop.service.reports` (the same functions the JSON API calls)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from .. import controls, domain, reports
from ..context import ServiceContext
from ..errors import DomainError, NotFound
from .auth import LOGIN_COOKIE, SESSION_COOKIE, SESSION_S, ConsoleAuth, Session, csrf_ok
from .charts import series_charts
from .data import STATES, Filters, job_page, job_rows, live_token, rules_and_tenants

STATIC = {"console.css": "text/css", "console.js": "text/javascript"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
OVERRIDE_ACTIONS = {"stop_now": "stop_now", "never_stop": "never_stop", "resume": None}

router = APIRouter(prefix="/ui", include_in_schema=False)
_env = Environment(loader=PackageLoader("evalstop.service.console", "templates"),
                   autoescape=select_autoescape(("html",)), auto_reload=False)
_env.filters["ts"] = lambda t: "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
_env.filters["num"] = lambda v: "" if v is None else f"{v:.4g}"
_env.filters["hours"] = lambda v: f"{v:.2f}"
_env.globals["urlencode"] = urlencode


def _ctx(request: Request) -> ServiceContext:
    ctx: ServiceContext = request.app.state.ctx
    return ctx


def _auth(request: Request) -> ConsoleAuth:
    auth: ConsoleAuth = request.app.state.console_auth
    return auth


def render(name: str, status: int = 200, **values: Any) -> HTMLResponse:
    html = _env.get_template(name).render(**values)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


async def _session(request: Request) -> Session | None:
    return await run_in_threadpool(_auth(request).decode, request.cookies.get(SESSION_COOKIE))


def _to_login() -> Response:
    return RedirectResponse("/ui/login", status_code=303, headers=SECURITY_HEADERS)


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


def _same_origin(request: Request) -> bool:
    """A POST whose Origin header (when the browser sends one) names this server's host. The
    scheme is not compared: behind a TLS-terminating proxy the server sees plain HTTP. The CSRF
    token is the defence; this is a second one."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


def _cookie_args(request: Request) -> dict[str, Any]:
    return {"httponly": True, "samesite": "strict", "path": "/ui", "secure": request.url.scheme == "https"}


# -- sign-in ------------------------------------------------------------------------------------
@router.get("/login")
async def login_page(request: Request) -> Response:
    nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    response = render("login.html", csrf=nonce, error="")
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=3600, **_cookie_args(request))
    return response


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    nonce = request.cookies.get(LOGIN_COOKIE)
    if not _same_origin(request) or not csrf_ok(nonce, form.get("csrf")):
        return render("login.html", 403, csrf=nonce or "", error="The form expired; sign in again.")
    session = await run_in_threadpool(_auth(request).sign_in, form.get("token", ""), form.get("name", ""))
    if session is None:
        return render("login.html", 401, csrf=nonce, error="Unknown token.")
    response = RedirectResponse("/ui/jobs", status_code=303, headers=SECURITY_HEADERS)
    cookie = _auth(request).encode(session)
    response.set_cookie(SESSION_COOKIE, cookie, max_age=SESSION_S, **_cookie_args(request))
    response.delete_cookie(LOGIN_COOKIE, path="/ui")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    session = await _session(request)
    form = await _form(request)
    if session is not None and not (_same_origin(request) and csrf_ok(session.csrf, form.get("csrf"))):
        return render("error.html", 403, session=session, message="Bad or missing CSRF token.")
    if session is not None:  # ends the session server-side: a copy of the cookie is refused too
        await run_in_threadpool(_auth(request).sign_out, session)
    response = _to_login()
    response.delete_cookie(SESSION_COOKIE, path="/ui")
    return response


# -- pages --------------------------------------------------------------------------------------
@router.get("")
@router.get("/")
async def home() -> Response:
    return RedirectResponse("/ui/jobs", status_code=303)


def _signed_out() -> Response:
    """What a page's live update gets without a session: 401, which the script reports as
    signed out (a redirect to the sign-in page would read as a 200)."""
    return Response("signed out", status_code=401, media_type="text/plain", headers=SECURITY_HEADERS)


@router.get("/jobs")
async def jobs_page(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _signed_out() if request.query_params.get("partial") else _to_login()
    f = Filters.parse(request.query_params)
    store = _ctx(request).store
    listed = await run_in_threadpool(job_rows, store, session.tenant, f)
    if request.query_params.get("partial") == "rows":
        return render("job_rows.html", listed=listed, f=f)
    rules, tenant_names = await run_in_threadpool(rules_and_tenants, store, session.tenant)
    return render("jobs.html", session=session, listed=listed, f=f, states=STATES, rules=rules,
                  tenants=tenant_names)


@router.get("/jobs/{job_id}")
async def job_view(request: Request, job_id: str) -> Response:
    session = await _session(request)
    live = request.query_params.get("partial") == "live"
    if session is None:
        return _signed_out() if live else _to_login()
    if not live:
        return await _job_response(request, session, job_id)
    try:
        token = await run_in_threadpool(live_token, _ctx(request).store, job_id, session.tenant)
    except NotFound:
        return render("error.html", 404, session=session, message=f"Job {job_id!r} not found.")
    if token == request.query_params.get("since"):
        return Response(status_code=204, headers=SECURITY_HEADERS)  # nothing changed: nothing redrawn
    return await _job_response(request, session, job_id, template="job_live.html", token=token)


async def _job_response(request: Request, session: Session, job_id: str, status: int = 200,
                        error: str = "", template: str = "job.html", token: str = "") -> Response:
    store = _ctx(request).store
    try:
        page = await run_in_threadpool(job_page, store, job_id, session.tenant)
    except NotFound:
        return render("error.html", 404, session=session, message=f"Job {job_id!r} not found.")
    return render(template, status, session=session, p=page, error=error, tenant_shadow=page.tenant_shadow,
                  token=token)


async def _checked_form(request: Request) -> tuple[Session | None, dict[str, str], Response | None]:
    session = await _session(request)
    if session is None:
        return None, {}, render("error.html", 401, session=None, message="Sign in first.")
    form = await _form(request)
    if not _same_origin(request) or not csrf_ok(session.csrf, form.get("csrf")):
        return session, form, render("error.html", 403, session=session, message="Bad or missing CSRF token.")
    return session, form, None


@router.post("/jobs/{job_id}/override")
async def override(request: Request, job_id: str) -> Response:
    session, form, refused = await _checked_form(request)
    if refused is not None or session is None:
        return refused or _to_login()
    action = form.get("action", "")
    if action not in OVERRIDE_ACTIONS:
        return await _job_response(request, session, job_id, 422, f"Unknown action {action!r}.")
    if action == "stop_now" and not form.get("reason", "").strip():
        return await _job_response(request, session, job_id, 422,
                                   "reason: say why this job must stop now (kept in the audit trail).")
    actor = controls.Actor(session.tenant, session.name, "console")

    def apply() -> None:
        before = domain.get_job(_ctx(request).store, job_id, session.tenant)["state"]
        domain.set_override(_ctx(request).store, job_id, session.tenant, OVERRIDE_ACTIONS[action],
                            actor=actor, reason=form.get("reason", "")[:1000])
        if action == "stop_now" and before == "running":
            _ctx(request).metrics.decisions.labels(source="override", shadow="false").inc()

    return await _act(request, session, job_id, apply)


@router.post("/jobs/{job_id}/retry")
async def retry(request: Request, job_id: str) -> Response:
    return await _control(request, job_id, lambda store, session, actor, reason, form: controls.retry_stop(
        store, job_id, actor, reason))


@router.post("/jobs/{job_id}/shadow")
async def shadow(request: Request, job_id: str) -> Response:
    return await _control(request, job_id, lambda store, session, actor, reason, form: domain.set_job_shadow(
        store, job_id, session.tenant, form.get("enabled") == "true", actor=actor, reason=reason))


@router.post("/jobs/{job_id}/release")
async def release(request: Request, job_id: str) -> Response:
    return await _control(request, job_id, lambda store, session, actor, reason, form: controls.release(
        store, job_id, actor, reason))


async def _control(request: Request, job_id: str, apply: Any) -> Response:
    """A hand control from a job page's form: signed in, CSRF checked, acted on as the session's
    principal (audited under the console channel) with the form's reason."""
    session, form, refused = await _checked_form(request)
    if refused is not None or session is None:
        return refused or _to_login()
    actor = controls.Actor(session.tenant, session.name, "console")
    reason = form.get("reason", "")[:1000]
    return await _act(request, session, job_id,
                      lambda: apply(_ctx(request).store, session, actor, reason, form))


async def _act(request: Request, session: Session, job_id: str, apply: Any) -> Response:
    try:
        await run_in_threadpool(apply)
    except NotFound:
        return render("error.html", 404, session=session, message=f"Job {job_id!r} not found.")
    except DomainError as exc:
        return await _job_response(request, session, job_id, exc.status_code, str(exc))
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303, headers=SECURITY_HEADERS)


@router.get("/savings")
async def savings(request: Request) -> Response:
    session = await _session(request)
    if session is None:
        return _to_login()
    store = _ctx(request).store
    shadow = await run_in_threadpool(reports.shadow_summary, store, session.tenant)
    reclaimed = await run_in_threadpool(reports.reclaimed, store, session.tenant)
    series: dict[str, Sequence[tuple[float, float]]] = {
        t["tenant"]: [(p["t"], p["gpu_hours"]) for p in t["series"]] for t in reclaimed}
    return render("savings.html", session=session, shadow=shadow, reclaimed=reclaimed,
                  chart=series_charts(series, store.clock()))


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC:
        return Response("not found", status_code=404)
    body = resources.files("evalstop.service.console").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name], headers={"Cache-Control": "max-age=3600",
                                                              "X-Content-Type-Options": "nosniff"})
