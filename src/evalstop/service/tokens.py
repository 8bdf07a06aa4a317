"""Tenant API tokens: rotate (a new token, shown once, stored hashed; the old one valid for an
optional grace) and revoke (the token is no one's). An operator acts on any tenant, a tenant on
its own token only. Each change is audited (``token_events``) and ends the tenant's console
sessions, in one transaction; a console sign-out is audited there too (``console/auth.py``).
Every replica hears of a change at once and forgets the tenant's cached tokens (:mod:`.revocation`);
``token_cache_s`` bounds how long a replica that missed it trusts them (docs/tenants.md,
"Tokens: rotation and revocation")."""

from __future__ import annotations

import secrets
from typing import Any

from .actors import MAX_REASON, Actor
from .domain import hash_token
from .errors import Forbidden, InvalidInput
from .store import Store
from .store import tenant as tenant_store

MAX_GRACE_S = 86_400.0


def new_token() -> str:
    return "es_" + secrets.token_urlsafe(32)


def owner(store: Store, token: str) -> tuple[str, float | None] | None:
    """``(tenant, seconds it stays valid)`` of a tenant token (None: no end, it is the current one;
    a number: it is in a rotation's grace), or None if it is no one's."""
    now = store.clock()
    found = tenant_store.token_owner(store, hash_token(token), now)
    if found is None:
        return None
    tenant, until = found
    return tenant, None if until is None else until - now


def authorize(actor: Actor, name: str, action: str) -> None:
    """An operator may act on any tenant's token; a tenant only on its own."""
    if actor.tenant is not None and actor.tenant != name:
        raise Forbidden(f"A token of tenant {actor.tenant!r} cannot {action} tenant {name!r}'s token.")


def rotate(
    store: Store, name: str, actor: Actor, *, grace_s: float = 0.0, reason: str = ""
) -> dict[str, Any]:
    """Give tenant ``name`` a new token; the replaced one stays valid ``grace_s`` seconds (0: none;
    a revoked token gets no grace). Returns ``{name, token, previous_valid_until}``."""
    authorize(actor, name, "rotate")
    if not 0 <= grace_s <= MAX_GRACE_S:
        raise InvalidInput(f"grace_s must be between 0 and {MAX_GRACE_S:g} seconds. Got {grace_s!r}.")
    _check_reason(reason)
    token = new_token()
    event = audit_event(actor, "rotate", reason)
    until = tenant_store.rotate_token(store, name, hash_token(token), grace_s, event)
    return {"name": name, "token": token, "previous_valid_until": until}


def revoke(store: Store, name: str, actor: Actor, *, reason: str = "") -> dict[str, Any]:
    """Make tenant ``name``'s token (and any token still in a rotation's grace) invalid; only a
    rotation by an operator gives the tenant a token again. Returns ``{name, revoked_at}``."""
    authorize(actor, name, "revoke")
    _check_reason(reason)
    when = tenant_store.revoke_token(store, name, audit_event(actor, "revoke", reason))
    return {"name": name, "revoked_at": when}


def history(store: Store, name: str, actor: Actor) -> list[dict[str, Any]]:
    """The tenant's token rotations and revocations and its console sign-outs, oldest first."""
    authorize(actor, name, "read the audit of")
    tenant_store.exists(store, name)
    return tenant_store.token_history(store, name)


def _check_reason(reason: str) -> None:
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"reason must be at most {MAX_REASON} characters. Got {len(reason)}.")


def audit_event(actor: Actor, action: str, reason: str) -> dict[str, Any]:
    """The ``token_events`` row of ``action`` by ``actor`` (without tenant, time and grace)."""
    return {"action": action, "principal": actor.principal, "actor": (actor.name or actor.principal)[:200],
            "reason": reason, "channel": actor.channel}
