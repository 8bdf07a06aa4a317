"""The app factory: ``create_app(settings)`` builds one service; nothing happens at import."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import _gc
from . import console, phases
from .context import ServiceContext
from .errors import DomainError
from .fairness import retry_after_header
from .fastpath import ScoresFastPath, replay
from .pulling import PullLoop, default_cursor_dir, load_pull_config
from .routes import ops, router
from .settings import ServiceSettings
from .store import DatabaseError, DatabaseUnavailable, ValueDoesNotFit

log = logging.getLogger("evalstop.service")


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    """A ready app: store opened (tables created), worker and pollers started with the app's
    lifespan. A bad ``pull_config`` raises :class:`~evalstop.service.pulling.PullConfigError`
    before anything is opened."""
    settings = settings or ServiceSettings()
    pull_config = load_pull_config(settings.pull_config) if settings.pull_config else None
    ctx = ServiceContext.build(settings)
    pull = (PullLoop.build(pull_config, ctx.store, default_cursor_dir(settings.database_url))
            if pull_config else None)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        phases.install()  # only with EVALSTOP_PHASES_OUT set (the load benchmarks)
        if ctx.watch is not None:
            ctx.watch.start()
        if settings.run_worker:
            ctx.worker.start()
        if pull is not None:
            pull.start()
        _gc.freeze_long_lived()  # after start-up: what it made lives until shutdown
        try:
            yield
        finally:
            if ctx.watch is not None:
                ctx.watch.stop()
            if pull is not None:
                pull.stop()
            ctx.worker.stop()
            if settings.run_worker:
                _release_leases(ctx)
            ctx.adapters.close()
            ctx.store.dispose()
            phases.uninstall()
            _gc.thaw()

    app = EvalStopAPI(title="EvalStop", version="1", lifespan=lifespan,
                      description="Stop reward-hacked jobs: push eval scores, get decisions, stops enforced.")
    app.state.ctx = ctx
    app.state.pull = pull
    app.include_router(router)
    app.include_router(ops)
    console.mount(app)
    app.add_exception_handler(DomainError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(DatabaseError, _database_error)
    lane: ASGIApp = app.behind
    if settings.fast_path:
        lane = ScoresFastPath(lane, ctx=ctx, domain_error=_domain_error, database_error=_database_error)
    app.front = BodyLimit(lane, max_bytes=settings.max_body_bytes)  # outermost: limits the fast path too
    return app


class EvalStopAPI(FastAPI):
    """FastAPI with the body-size limit and the scores fast lane (:mod:`.fastpath`) in front of
    its own middleware stack, not inside it: the lane's request then skips FastAPI's telemetry
    check, Starlette's error middleware, FastAPI's body-limit wrapper and two more calls (about
    5 % of a single score's server CPU, by profile). What that stack does for the lane's request
    is nothing it needs: an exception the lane does not map is answered 500 by uvicorn instead
    of Starlette (the same reply, ``Internal Server Error``, and logged either way); FastAPI's
    OpenTelemetry instrumentation, which runs only when a provider is configured (evalstop does
    not configure one), does not see the lane's requests. Every other request (and every HTTP
    request when ``front`` is None) goes through the whole stack, as before."""

    front: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.front is not None:
            await self.front(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)

    async def behind(self, scope: Scope, receive: Receive, send: Send) -> None:
        """FastAPI itself: its middleware stack and routes, behind :attr:`front`."""
        await super().__call__(scope, receive, send)


def _release_leases(ctx: ServiceContext) -> None:
    """At shutdown, hand the worker's outbox rows back at once (another replica need not wait for
    the leases to expire); a database that is gone by now only delays that."""
    try:
        released = ctx.worker.release_leases()
    except DatabaseUnavailable as exc:
        log.warning("shutdown: outbox leases not released (%s); they expire by themselves",
                    type(exc).__name__)
        return
    if released:
        log.info("shutdown: released %d outbox lease(s) for the other replicas", released)


async def _domain_error(_request: Request, exc: Exception) -> JSONResponse:
    status = exc.status_code if isinstance(exc, DomainError) else 400
    retry_after = getattr(exc, "retry_after_s", None)
    headers = {"Retry-After": retry_after_header(retry_after)} if retry_after is not None else None
    return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 naming each bad field. The bad input is not echoed: it may be NaN (not JSON) or a secret.
    A body sent as anything but JSON is a 415 that says so."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    content_type = request.headers.get("content-type", "")
    if "json" not in content_type and any(e["loc"][:1] == ("body",) for e in errors):
        hint = f"Send the body as JSON with 'Content-Type: application/json' (got {content_type!r})."
        return JSONResponse({"detail": hint}, status_code=415)
    detail = [{"loc": _loc(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
    return JSONResponse({"detail": detail}, status_code=422)


def _loc(loc: Any) -> list[Any]:
    """Drop the union tags ("one"/"batch") pydantic puts in the path of the scores body."""
    parts = list(loc)
    if len(parts) > 1 and parts[0] == "body" and parts[1] in ("one", "batch"):
        del parts[1]
    return parts


async def _database_error(_request: Request, exc: Exception) -> JSONResponse:
    """503 when the database is unreachable; otherwise 422 for a value it cannot hold (a
    ``DataError``: too long, out of range) and 500 for anything else. Logged by the error's class
    and SQLSTATE only: the statement's parameters and the database's own message (its DETAIL
    repeats the row) may hold a tenant's values or a token's hash."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlstate", None) or getattr(orig, "sqlite_errorname", None) or "-"
    log.error("database error: %s (%s)", type(orig if orig is not None else exc).__name__, code)
    if isinstance(exc, DatabaseUnavailable):
        return JSONResponse({"detail": "Database unavailable; retry later."}, status_code=503,
                            headers={"Retry-After": "1"})
    if isinstance(exc, ValueDoesNotFit):
        return JSONResponse({"detail": "A value does not fit the database (too long or out of range)."},
                            status_code=422)
    return JSONResponse({"detail": "Internal Server Error"}, status_code=500)


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, whether or not Content-Length is sent."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, replay(whole, receive), send)

    async def _refuse(self, send: Send) -> None:
        detail = f"Request body larger than {self.max_bytes} bytes."
        response = JSONResponse({"detail": detail}, status_code=413)
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Any:
    return {"type": "http.disconnect"}
