"""Console sign-in: server-side sessions named by a signed random id, and CSRF tokens for every
form (docs/console.md, "Sign-in").

A sign-in adds a row to ``console_sessions`` (principal, the sha256 of the token used, the name the
person gave, a random CSRF secret, created, expires, revoked) and sets a cookie holding only
``<id>.<mac>``: a 256-bit random id and its HMAC-SHA256 under a random key that the first replica
generated and stored in the database (``service_secrets``), so every replica accepts the same
cookies. Nothing in the cookie depends on the admin token, so a cookie says nothing about it.
The database holds only the sha256 of each id. Each request reads the session's row: signing
out, or rotating or revoking the tenant's token, ends the session for every copy of its cookie.
An operator session also ends when the admin token changes. A tenant's sign-out is audited with
its token's changes (``token_events``, action ``sign_out``), in the same transaction; an
operator's, which has no tenant to be filed under, is logged (docs/service.md, "Operator console").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from ..actors import Actor
from ..settings import ServiceSettings
from ..store import Store
from ..store import session as session_store
from ..store import tenant as tenant_store
from ..tokens import audit_event

SESSION_COOKIE = "evalstop_session"
LOGIN_COOKIE = "evalstop_login_csrf"
SESSION_S = 8 * 3600
SECRET_NAME = "console-session"
log = logging.getLogger("evalstop.service.console")


@dataclass(frozen=True)
class Session:
    tenant: str | None  # None: operator
    token_hash: str
    name: str
    csrf: str
    expires: float
    sid: str = ""  # the random id the cookie carries (never stored; the database has its sha256)

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
        self._key = bytes.fromhex(session_store.shared_secret(store, SECRET_NAME))
        self.store, self.clock = store, clock

    # -- sign-in and sign-out ------------------------------------------------------------------
    def sign_in(self, token: str, name: str) -> Session | None:
        """A new session for ``token`` (the admin token or a tenant's current token, not one in
        its rotation grace), or None if it is neither."""
        digest = _sha256(token)
        if self._admin_hash is not None and _same(digest, self._admin_hash):
            tenant = None
        else:
            found = tenant_store.for_token_hash(self.store, digest, self.clock(), grace=False)
            if found is None:
                return None
            tenant = found
        now = self.clock()
        s = Session(tenant, digest, name.strip()[:80], secrets.token_urlsafe(24), now + SESSION_S,
                    secrets.token_urlsafe(32))
        session_store.create(self.store, {
            "id_hash": _sha256(s.sid), "tenant": tenant, "token_hash": digest, "name": s.name,
            "csrf": s.csrf, "created_at": now, "expires_at": s.expires})
        return s

    def sign_out(self, s: Session) -> None:
        """End ``s`` for every copy of its cookie, and audit it (see the module's docstring)."""
        actor = Actor(s.tenant, s.name, "console")
        event = None if s.tenant is None else {
            "tenant": s.tenant, "grace_s": 0.0, **audit_event(actor, "sign_out", "")}
        ended = session_store.revoke(self.store, _sha256(s.sid), self.clock(), event)
        if ended and s.tenant is None:
            log.info("console sign-out: %s", actor.display)

    # -- the cookie ----------------------------------------------------------------------------
    def encode(self, s: Session) -> str:
        return f"{s.sid}.{self._sign(s.sid)}"

    def decode(self, cookie: str | None) -> Session | None:
        """The session ``cookie`` names if its MAC is good (a forged cookie costs no database
        read) and its row is neither revoked nor expired; else None."""
        if not cookie or cookie.count(".") != 1:
            return None
        sid, mac = cookie.split(".")
        if not _same(mac, self._sign(sid)):
            return None
        row = session_store.live(self.store, _sha256(sid), self.clock())
        if row is None:
            return None
        if row["tenant"] is None and not (
                self._admin_hash is not None and _same(row["token_hash"], self._admin_hash)):
            return None  # signed in with an admin token this replica no longer has
        return Session(row["tenant"], row["token_hash"], row["name"], row["csrf"], row["expires_at"], sid)

    def _sign(self, sid: str) -> str:
        mac = hmac.new(self._key, b"evalstop console session v2|" + sid.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def csrf_ok(expected: str | None, given: str | None) -> bool:
    return bool(expected) and bool(given) and _same(str(expected), str(given))


def _same(a: str, b: str) -> bool:
    """Constant-time equality of two texts, any characters: ``compare_digest`` raises TypeError
    on a str with a non-ASCII character (a forged cookie or form field), so compare UTF-8 bytes."""
    return hmac.compare_digest(a.encode(), b.encode())


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
