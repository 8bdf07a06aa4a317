"""Console sign-in: a signed session cookie, checked again against the token store on every
request, and CSRF tokens for every form.

The cookie holds the principal (operator or tenant), the sha256 of the token used to sign in,
the name the person gave, a CSRF secret and an expiry, signed with HMAC-SHA256. The key is
derived from the admin token (so every replica of one deployment accepts the same cookies and
changing the admin token signs everyone out), or random per process when there is no admin token.
Each request re-checks the token hash: a tenant whose token is no longer known is signed out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from ..settings import ServiceSettings
from ..store import Store
from ..store import tenant as tenant_store

SESSION_COOKIE = "evalstop_session"
LOGIN_COOKIE = "evalstop_login_csrf"
SESSION_S = 8 * 3600


@dataclass(frozen=True)
class Session:
    tenant: str | None  # None: operator
    token_hash: str
    name: str
    csrf: str
    expires: float

    @property
    def admin(self) -> bool:
        return self.tenant is None

    @property
    def principal(self) -> str:
        return "operator" if self.tenant is None else f"tenant {self.tenant}"


class ConsoleAuth:
    def __init__(self, settings: ServiceSettings, store: Store, clock: Any = time.time) -> None:
        admin = settings.admin_token
        self._admin_hash = None if admin is None else _sha256(admin.get_secret_value())
        self._key = (hmac.new(admin.get_secret_value().encode(), b"evalstop console session v1",
                              hashlib.sha256).digest() if admin is not None else secrets.token_bytes(32))
        self.store, self.clock = store, clock

    # -- sign-in -----------------------------------------------------------------------------
    def sign_in(self, token: str, name: str) -> Session | None:
        """A new session for ``token`` (the admin token or a tenant's), or None if it is neither."""
        digest = _sha256(token)
        if self._admin_hash is not None and hmac.compare_digest(digest, self._admin_hash):
            tenant = None
        else:
            found = self._tenant_for_hash(digest)
            if found is None:
                return None
            tenant = found
        return Session(tenant, digest, name.strip()[:80], secrets.token_urlsafe(24), self.clock() + SESSION_S)

    def _tenant_for_hash(self, digest: str) -> str | None:
        return tenant_store.for_token_hash(self.store, digest)

    # -- the cookie ----------------------------------------------------------------------------
    def encode(self, s: Session) -> str:
        body = json.dumps({"t": s.tenant, "h": s.token_hash, "n": s.name, "c": s.csrf, "e": s.expires},
                          separators=(",", ":")).encode()
        payload = base64.urlsafe_b64encode(body).decode().rstrip("=")
        return f"{payload}.{self._sign(payload)}"

    def decode(self, cookie: str | None) -> Session | None:
        """The session in ``cookie`` if its signature is good, it has not expired and its token
        is still the admin token or a known tenant's; else None."""
        if not cookie or cookie.count(".") != 1:
            return None
        payload, signature = cookie.split(".")
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            s = Session(data["t"], str(data["h"]), str(data["n"]), str(data["c"]), float(data["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        if s.expires < self.clock():
            return None
        if s.tenant is None:
            still = self._admin_hash is not None and hmac.compare_digest(s.token_hash, self._admin_hash)
        else:
            still = self._tenant_for_hash(s.token_hash) == s.tenant
        return s if still else None

    def _sign(self, payload: str) -> str:
        mac = hmac.new(self._key, payload.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def csrf_ok(expected: str | None, given: str | None) -> bool:
    return bool(expected) and bool(given) and hmac.compare_digest(str(expected), str(given))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
