"""A fast lane for the hot request, ``POST /v1/jobs/{job_id}/scores``, in front of FastAPI.

Profiled at 1,000 single scores/s, FastAPI's routing and dependency solving cost more CPU than
storing the score and deciding. This ASGI middleware answers the request itself when it is the
ordinary case: a JSON body that validates against the same pydantic type the route declares
(:data:`~.schemas.ScoresBody`, validated the way FastAPI does: ``json.loads`` then python-mode
validation), and a bearer token that is the admin token or a tenant token this replica checked
against the database within ``token_cache_s`` (no database read here). It then runs the same
code as the route (:func:`.routes.ingest_reply`) and maps domain and database errors with the
app's own handlers. Anything else (bad JSON, a validation error, another content type, an
unknown or missing token) goes on to FastAPI untouched, with the body replayed, so every error
reply is exactly the route's. The route stays the documented one (OpenAPI) and the reference.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable

from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import phases
from .context import ServiceContext
from .errors import DomainError
from .routes import UNAUTHORIZED, Principal, ingest_reply, known_principal
from .schemas import ScoreBatch, ScoreIn, ScoresBody
from .store import DatabaseError

#: Bodies longer than this (bytes) are parsed in a worker thread; a single score is about 60.
BIG_BODY = 8192
SCORES_PATH = re.compile(r"^/v1/jobs/([^/]+)/scores$")
Handler = Callable[[Request, Exception], Awaitable[Response]]


class ScoresFastPath:
    """See the module docstring. Install inside the body-size limit (the body is read whole)."""

    def __init__(
        self, app: ASGIApp, ctx: ServiceContext, domain_error: Handler, database_error: Handler
    ) -> None:
        self.app, self.ctx = app, ctx
        self.domain_error, self.database_error = domain_error, database_error
        self.body_type: TypeAdapter[ScoreIn | ScoreBatch] = TypeAdapter(ScoresBody)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = SCORES_PATH.match(scope["path"]) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        trace = phases.begin(headers)  # None unless the benchmark's phase log is on
        try:
            await self._answer(match.group(1), headers, scope, receive, send)
        finally:
            phases.end(trace)

    async def _answer(self, job_id: str, headers: dict[bytes, bytes], scope: Scope, receive: Receive,
                      send: Send) -> None:
        token = bearer_token(headers.get(b"authorization", b""))
        who = None if token is None else known_principal(self.ctx, token)
        message = await receive()
        parsed = None
        ordinary = (token is not None and message["type"] == "http.request" and not message.get("more_body")
                    and headers.get(b"content-type", b"").startswith(b"application/json"))
        if ordinary and who is not None and who.tenant is not None:
            try:  # a flooding tenant is refused before its body is parsed (parsing is the cost)
                self._check_rate(who.tenant)
            except DomainError as exc:
                await (await self.domain_error(Request(scope, receive), exc))(scope, receive, send)
                return
        if ordinary:
            body = message.get("body", b"")
            # A big batch is parsed off the event loop: the loop keeps answering other requests
            # (a 1,000-score body takes 3-8 ms to parse; a single score about 20 us).
            parsed = await asyncio.to_thread(self._parse, body) if len(body) > BIG_BODY else self._parse(body)
        if parsed is not None and who is None and token is not None:
            # A token this replica has not checked lately (a new tenant's first requests), with a
            # body the route would accept: looked up here with the tenant's policy, in one thread
            # hop instead of FastAPI's three; unknown, it gets the route's 401.
            who = await asyncio.to_thread(self._look_up, token)
            if who is None:
                await JSONResponse({"detail": UNAUTHORIZED}, status_code=401,
                                   headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        phases.mark("loop")
        if parsed is None or who is None:  # not the ordinary case: FastAPI answers, from the same messages
            await self.app(scope, replay(message, receive), send)
            return
        try:
            response = await ingest_reply(self.ctx, job_id, who, parsed)
        except DomainError as exc:
            response = await self.domain_error(Request(scope, receive), exc)
        except DatabaseError as exc:  # unavailable (503), or any other (logged without values)
            response = await self.database_error(Request(scope, receive), exc)
        await response(scope, receive, send)

    def _check_rate(self, tenant: str) -> None:
        policy = self.ctx.policies.cached(tenant)
        if policy is not None:
            self.ctx.buckets.check_not_empty(tenant, policy.limits)

    def _look_up(self, token: str) -> Principal | None:
        """The token's tenant from the database (cached), and its policy read into the cache."""
        if phases.RECORDER is not None:
            phases.note("token", self.ctx.tokens.miss_kind(token))
        tenant = self.ctx.tokens.load(self.ctx.store, token)
        if tenant is None:
            return None
        self.ctx.policies.get(tenant)
        return Principal(tenant)

    def _parse(self, body: bytes) -> ScoreIn | ScoreBatch | None:
        try:
            return self.body_type.validate_python(json.loads(body), from_attributes=True)
        except (ValueError, ValidationError, RecursionError):  # JSONDecodeError, UnicodeDecodeError too
            return None  # the route parses it again and answers (400 for bad or too deeply nested JSON)


def bearer_token(authorization: bytes) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = authorization.decode("latin-1").partition(" ")
    return token if scheme.lower() == "bearer" and token else None


def replay(first: Message, receive: Receive) -> Receive:
    """``receive`` with ``first`` (already taken from it) put back in front: the body-size limit
    and this fast lane both read the body and hand the request on with it."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await receive()

    return replayed
