"""Who changes a job by hand, and the audit row each accepted change leaves. Both the domain
layer (overrides, shadow) and :mod:`.controls` (stop retries, release) record here."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidInput
from .store import Conn
from .store import trail as trail_store

ACTIONS = ("stop_now", "never_stop", "resume", "retry_stop", "release", "shadow_on", "shadow_off",
           "resubmit")
MAX_REASON = 1000


@dataclass(frozen=True)
class Actor:
    """Who acts: the authenticated principal (``tenant`` None = operator), the name the person
    gave (console sign-in; self-declared, shown beside the principal), and the channel."""

    tenant: str | None
    name: str = ""
    channel: str = "api"

    @property
    def principal(self) -> str:
        return "operator" if self.tenant is None else f"tenant:{self.tenant}"

    @property
    def display(self) -> str:
        return f"{self.name} ({self.principal})" if self.name else self.principal


def record(conn: Conn, job_id: str, actor: Actor, action: str, reason: str, now: float) -> None:
    """Add one audit row in the caller's transaction (so it commits with the change it records)."""
    if action not in ACTIONS:
        raise ValueError(f"audit action must be one of {', '.join(ACTIONS)}. Got {action!r} instead.")
    if len(reason) > MAX_REASON:
        raise InvalidInput(f"reason must be at most {MAX_REASON} characters. Got {len(reason)}.")
    trail_store.record(conn, job_id, now, principal=actor.principal,
                       actor=(actor.name or actor.principal)[:200], action=action, reason=reason,
                       channel=actor.channel)
