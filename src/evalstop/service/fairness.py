"""Per-tenant rate limits and size quotas.

Every tenant has a token bucket of scores: ``scores_per_s`` refill, ``burst`` capacity. A
request of n scores takes n tokens or is refused at once with 429 and ``Retry-After`` (the
seconds until n tokens are back); nothing is queued, so a heavy tenant's backlog never sits in
front of another tenant's commit. On SQLite (one process) buckets live in
memory; on PostgreSQL every replica draws on one bucket per tenant in the database
(:class:`SharedTokenBuckets`), so R replicas still admit the tenant's rate once. The
size quota ``max_live_jobs`` is checked in the registration's transaction, under a lock of the
tenant row, so concurrent registrations (on any replica) cannot pass it together.

Defaults come from the settings; the operator overrides them per tenant
(``PUT /v1/tenants/{name}/quota``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from . import phases
from .errors import DomainError
from .store import Store
from .store import bucket as bucket_store


class RateLimited(DomainError):
    """A tenant over its rate (429); ``retry_after_s`` says when to come back."""

    status_code = 429

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QuotaExceeded(DomainError):
    """A size quota (live jobs) is used up (429, retry when a job has stopped)."""

    status_code = 429
    retry_after_s = 60.0


class Quota(BaseModel):
    """One tenant's limits; a field left None takes the service default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scores_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    burst: int | None = Field(default=None, ge=1)
    max_live_jobs: int | None = Field(default=None, ge=0)


@dataclass(frozen=True)
class Limits:
    scores_per_s: float
    burst: int
    max_live_jobs: int


def effective(quota: Mapping[str, Any] | None, default: Limits) -> Limits:
    q = Quota.model_validate(quota or {})
    return Limits(q.scores_per_s if q.scores_per_s is not None else default.scores_per_s,
                  q.burst if q.burst is not None else default.burst,
                  q.max_live_jobs if q.max_live_jobs is not None else default.max_live_jobs)


class TokenBuckets:
    """One bucket per tenant, O(1) per request, under one lock (a few microseconds)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._state: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, tenant: str, n: int, limits: Limits) -> None:
        """Take ``n`` tokens from ``tenant``'s bucket or raise :class:`RateLimited`."""
        rate, cap = limits.scores_per_s, float(limits.burst)
        with self._lock:
            now = self.clock()
            tokens, at = self._state.get(tenant, (cap, now))
            tokens = min(cap, tokens + (now - at) * rate)
            if n <= tokens:
                self._state[tenant] = (tokens - n, now)
                return
            self._state[tenant] = (tokens, now)
        raise refusal(tenant, n, tokens, limits)

    def take_local(self, tenant: str, n: int, limits: Limits) -> bool:
        """:meth:`take` when it needs no I/O (always, here); False: call :meth:`take` off the
        event loop (:class:`SharedTokenBuckets` when its lease runs out)."""
        self.take(tenant, n, limits)
        return True

    def charge(self, tenant: str, tokens: float, limits: Limits) -> None:
        """Take ``tokens`` after the fact (work already done, such as a rule's CPU time): the
        bucket may go into debt, down to minus one burst, and refuses until it has refilled."""
        rate, cap = limits.scores_per_s, float(limits.burst)
        with self._lock:
            now = self.clock()
            held, at = self._state.get(tenant, (cap, now))
            held = min(cap, held + (now - at) * rate)
            self._state[tenant] = (max(-cap, held - tokens), now)


    def check_not_empty(self, tenant: str, limits: Limits) -> None:
        """Raise :class:`RateLimited` if the bucket holds less than one token, without taking
        any: lets the fast path refuse a flooding tenant before parsing its body."""
        with self._lock:
            found = self._state.get(tenant)
            if found is None:
                return
            tokens = min(float(limits.burst), found[0] + (self.clock() - found[1]) * limits.scores_per_s)
        if tokens < 1:
            raise refusal(tenant, 1, tokens, limits)


def rule_work_tokens(n_scores: int, rule_cpu_s: float, ms_per_score: float) -> float:
    """The tokens a request owes beyond its ``n_scores``: each score's token covers
    ``ms_per_score`` of its rule's CPU; every further ``ms_per_score`` costs one more."""
    return max(0.0, 1000.0 * rule_cpu_s / ms_per_score - n_scores)


def refusal(tenant: str, n: int, tokens: float, limits: Limits) -> RateLimited:
    """The 429 for a request of ``n`` scores when the bucket holds ``tokens``."""
    if n > limits.burst:
        return RateLimited(f"scores: a request of {n} scores exceeds tenant {tenant!r}'s burst of "
                           f"{limits.burst}; send smaller batches.", retry_after_s=1.0)
    rate = limits.scores_per_s
    wait = (n - tokens) / rate
    return RateLimited(f"Tenant {tenant!r} is over its rate of {rate:g} scores/s; retry in {wait:.2f} s.",
                       retry_after_s=wait)


class SharedTokenBuckets(TokenBuckets):
    """Each tenant's bucket in the database (``tenant_buckets``), shared by every replica.

    A replica takes tokens from the shared bucket in leases of up to ``lease_s`` seconds of the
    tenant's rate and spends them locally, so most requests cost no round trip (one lease per
    ``lease_s`` per busy tenant and replica). Tokens leave the shared bucket before they are
    spent, so R replicas together never admit more than the tenant's rate and burst; what a
    lease costs is that up to R - 1 unspent leases (each ``lease_s`` of rate) may sit on other
    replicas while one is refused. The refill clock is the database's, so replicas on different
    machines agree. A lease is one short transaction with the tenant's row locked, committed
    without waiting for its WAL flush (losing a bucket update in a crash only refills it).
    """

    def __init__(
        self, store: Store, lease_s: float = 0.05, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(clock)
        self.store, self.lease_s = store, lease_s
        self._leased: dict[str, float] = {}  # tenant -> tokens this replica holds
        self._refused_until: dict[str, float] = {}  # tenant -> local clock until which it is over
        self._leasing: dict[str, threading.Lock] = {}  # tenant -> held while this replica leases

    def take_local(self, tenant: str, n: int, limits: Limits) -> bool:
        with self._lock:
            have = self._leased.get(tenant, 0.0)
            if n <= have:
                self._leased[tenant] = have - n
                return True
        return False

    def charge(self, tenant: str, tokens: float, limits: Limits) -> None:
        """Debt on this replica's lease (at most one burst): the next :meth:`take` leases it from
        the shared bucket before any new score is admitted."""
        with self._lock:
            self._leased[tenant] = max(-float(limits.burst), self._leased.get(tenant, 0.0) - tokens)

    def take(self, tenant: str, n: int, limits: Limits) -> None:
        if self.take_local(tenant, n, limits):
            return
        if n > limits.burst:
            raise refusal(tenant, n, 0.0, limits)
        # One lease in flight per tenant on this replica: a new tenant's first concurrent requests
        # would each lock the tenant's row in turn; the later ones take from the first one's lease.
        with self._lease_lock(tenant):
            if not self.take_local(tenant, n, limits):
                self._take_leased(tenant, n, limits)

    def _lease_lock(self, tenant: str) -> threading.Lock:
        with self._lock:
            if len(self._leasing) >= 10_000:  # bounded; a lock dropped here only allows a second lease
                self._leasing.clear()
            return self._leasing.setdefault(tenant, threading.Lock())

    def _take_leased(self, tenant: str, n: int, limits: Limits) -> None:
        with self._lock:
            have = self._leased.pop(tenant, 0.0)
        need = min(n - have, float(limits.burst))  # a debt is paid at most one burst at a time
        began = time.monotonic_ns()
        granted, tokens = self._lease(tenant, need, need + limits.scores_per_s * self.lease_s, limits)
        phases.since("lease", began)
        with self._lock:
            left = have if granted == 0.0 else granted - need
            self._leased[tenant] = self._leased.get(tenant, 0.0) + left
            if granted == 0.0:
                self._refused_until[tenant] = self.clock() + (need - tokens) / limits.scores_per_s
        if granted == 0.0:
            raise refusal(tenant, n, tokens + have, limits)

    def check_not_empty(self, tenant: str, limits: Limits) -> None:
        with self._lock:
            wait = self._refused_until.get(tenant, 0.0) - self.clock()
        if wait > 0:
            raise refusal(tenant, 1, 1.0 - wait * limits.scores_per_s, limits)

    def _lease(self, tenant: str, need: float, want: float, limits: Limits) -> tuple[float, float]:
        """Take ``want`` tokens (at least ``need``, else none) from the shared bucket; return
        (tokens granted, tokens the bucket held)."""
        return bucket_store.lease(self.store, tenant, need, want, float(limits.burst), limits.scores_per_s)


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` takes whole seconds: round up, at least 1."""
    return str(max(1, math.ceil(seconds)))
