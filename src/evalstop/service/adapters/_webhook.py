"""Generic webhook: POST each action, HMAC-signed, to an operator-configured URL.

Request body (JSON): ``{"action": "pin"|"signal"|"hard_stop"|"status", "job_id", "tenant",
"external_ref", "options", "checkpoint_uri"}``. Headers: ``X-EvalStop-Timestamp`` (unix seconds),
``X-EvalStop-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`` and
``Idempotency-Key`` (same key for a repeated action). Replies: 2xx done (``status`` answers
``{"stopped": bool}``); 404/410 the receiver no longer knows the job (counts as stopped);
409 already in that state (success); other 4xx a permanent error; 5xx, 408, 429 and timeouts are
retryable.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, ValidationInfo

from evalstop.service.adapters._base import (
    AdapterError,
    Backend,
    EnforcementAdapter,
    JobRef,
    NotOwned,
    scope_section,
)
from evalstop.service.adapters._common import (
    fail_for_status,
    import_httpx,
    send,
    setting_float,
    setting_str,
)
from evalstop.service.adapters._scope import ScopeSection, declared, has_traversal
from evalstop.service.errors import InvalidInput

SIGNATURE_HEADER = "X-EvalStop-Signature"
TIMESTAMP_HEADER = "X-EvalStop-Timestamp"
GONE = frozenset({404, 410})


def url_within(url: str, prefix: str) -> bool:
    """``url`` is under ``prefix``: same scheme, host and port, no credentials, and the path
    continues the prefix's at a ``/`` (``/hooks`` does not cover ``/hooks-evil``)."""
    try:
        u, p = urlsplit(url), urlsplit(prefix)
        same_origin = (u.scheme.lower(), u.hostname, u.port) == (p.scheme.lower(), p.hostname, p.port)
    except ValueError:
        return False
    if not same_origin or not p.hostname or u.username or u.password or any(c in url for c in "\r\n\t "):
        return False
    if has_traversal(u.path):
        return False
    base = p.path.rstrip("/")
    return u.path == base or u.path.startswith(base + "/")


def _is_origin_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port
    except ValueError:
        return False
    return (parts.scheme.lower() in ("http", "https") and bool(host) and port != 0 and not parts.username
            and not parts.password and not any(c.isspace() for c in value) and not has_traversal(parts.path))


def _url_prefix(value: str, info: ValidationInfo) -> str:
    if declared(info) and not _is_origin_url(value):
        raise ValueError(f"must be an http(s) URL with a host and no credentials, spaces or '..', "
                         f"got {value!r}")
    return value


class WebhookScope(ScopeSection):
    url_prefixes: list[Annotated[str, AfterValidator(_url_prefix)]] = Field(min_length=1)


class WebhookBackend(Backend):
    """A job's URL (its ``url`` option, else the service's) lies under one of the scope's prefixes."""

    scope = WebhookScope

    def check_reference(
        self, tenant: str, section: Any, ref: str, options: Mapping[str, Any], settings: Mapping[str, Any]
    ) -> None:
        url = options.get("url", settings.get("url"))
        if not isinstance(url, str) or not any(url_within(url, p) for p in section.url_prefixes):
            raise InvalidInput(f"target_options.url: {url!r} is outside tenant {tenant!r}'s scope "
                               f"(URL prefixes {section.url_prefixes}).")


BACKEND = WebhookBackend()


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify_signature(
    secret: str, timestamp: str, body: bytes, signature: str, *, max_age_s: float = 300.0,
    now: float | None = None,
) -> bool:
    """For receivers: True if ``signature`` is valid and ``timestamp`` is fresh."""
    try:
        age = (time.time() if now is None else now) - float(timestamp)
    except ValueError:
        return False
    expected = sign(secret, timestamp, body).encode()  # bytes: a non-ASCII str would raise TypeError
    return abs(age) <= max_age_s and hmac.compare_digest(expected, signature.encode())


def idempotency_key(job_id: str, action: str, checkpoint_uri: str | None) -> str:
    """``<job_id>:<action>[:<sha256 of the URI, 32 hex>]``: ASCII whatever the URI holds
    (non-ASCII, CR/LF), and the same for a repeated action."""
    key = f"{job_id}:{action}"
    if checkpoint_uri:
        key += ":" + hashlib.sha256(checkpoint_uri.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return key


class WebhookAdapter(EnforcementAdapter):
    name = "webhook"

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.url = setting_str(self.name, settings, "url")
        self._secret = setting_str(self.name, settings, "secret")
        self.timeout_s = setting_float(self.name, settings, "timeout_s", 5.0)
        httpx = import_httpx(self.name)
        self._client = httpx.Client(timeout=self.timeout_s)

    def __repr__(self) -> str:  # never show the secret
        return f"WebhookAdapter(url={self.url!r})"

    def _post(self, job: JobRef, action: str, checkpoint_uri: str | None = None) -> Any:
        payload = {
            "action": action, "job_id": job.job_id, "tenant": job.tenant,
            "external_ref": job.external_ref, "options": dict(job.options),
            "checkpoint_uri": checkpoint_uri,
        }
        body = json.dumps(payload, sort_keys=True).encode()
        ts = str(int(time.time()))
        headers = {
            "Content-Type": "application/json", TIMESTAMP_HEADER: ts,
            SIGNATURE_HEADER: sign(self._secret, ts, body),
            "Idempotency-Key": idempotency_key(job.job_id, action, checkpoint_uri),
        }
        what = f"webhook {action} for job {job.job_id}"
        resp = send(self._client, "POST", self.url_for(job), what=what, content=body, headers=headers)
        if resp.status_code in GONE:
            return {"stopped": True, "gone": True}
        if resp.status_code == 409:
            return {}
        fail_for_status(resp, what)
        try:
            return resp.json()
        except ValueError:
            return {}

    def url_for(self, job: JobRef) -> str:
        """The job's ``url`` option (a receiver per tenant), else the configured URL."""
        url = job.options.get("url", self.url)
        if not isinstance(url, str):
            raise AdapterError(f"job {job.job_id}: option 'url' must be a string, got {url!r}",
                               retryable=False)
        return url

    def check_owner(self, job: JobRef, *, must_exist: bool = False) -> None:
        """The URL posted to is still under one of the tenant's prefixes (the scope may have
        shrunk since registration)."""
        scope = scope_section(job, self.name)
        if scope is None:
            return
        url = self.url_for(job)
        if not any(url_within(url, p) for p in scope.get("url_prefixes") or ()):
            raise NotOwned(f"job {job.job_id}: webhook URL {url!r} is outside tenant {job.tenant!r}'s scope")

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        if checkpoint_uri is not None:
            self._post(job, "pin", checkpoint_uri)

    def signal(self, job: JobRef) -> None:
        self._post(job, "signal")

    def hard_stop(self, job: JobRef) -> None:
        self._post(job, "hard_stop")

    def is_stopped(self, job: JobRef) -> bool:
        reply = self._post(job, "status")
        stopped = reply.get("stopped") if isinstance(reply, dict) else None
        if not isinstance(stopped, bool):
            raise AdapterError(f"webhook status for job {job.job_id}: reply lacks a boolean "
                               f"'stopped': {reply!r}", retryable=False)
        return stopped

    def close(self) -> None:
        self._client.close()
