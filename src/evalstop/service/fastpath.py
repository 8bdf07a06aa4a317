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
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import phases
from .context import ServiceContext
from .errors import DomainError
from .routes import Principal, ingest_reply, known_principal
from .schemas import ScoreBatch, ScoreIn, ScoresBody
from .store import DatabaseUnavailable

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
        who = self._caller(headers.get(b"authorization", b""))
        message = await receive()
        parsed = None
        ordinary = (who is not None and message["type"] == "http.request" and not message.get("more_body")
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
        phases.mark("loop")
        if parsed is None or who is None:  # not the ordinary case: FastAPI answers, from the same messages
            await self.app(scope, replay(message, receive), send)
            return
        try:
            response = await ingest_reply(self.ctx, job_id, who, parsed)
        except DomainError as exc:
            response = await self.domain_error(Request(scope, receive), exc)
        except DatabaseUnavailable as exc:
            response = await self.database_error(Request(scope, receive), exc)
        await response(scope, receive, send)

    def _check_rate(self, tenant: str) -> None:
        policy = self.ctx.policies.cached(tenant)
        if policy is not None:
            self.ctx.buckets.check_not_empty(tenant, policy.limits)

    def _caller(self, authorization: bytes) -> Principal | None:
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        who = known_principal(self.ctx, token)
        if who is None and phases.RECORDER is not None:
            phases.note("token", self.ctx.tokens.miss_kind(token))
        return who

    def _parse(self, body: bytes) -> ScoreIn | ScoreBatch | None:
        try:
            return self.body_type.validate_python(json.loads(body), from_attributes=True)
        except (ValueError, ValidationError, RecursionError):  # JSONDecodeError, UnicodeDecodeError too
            return None  # the route parses it again and answers (400 for bad or too deeply nested JSON)


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
