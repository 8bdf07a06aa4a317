"""Per-tenant rate limits and size quotas.

Every tenant has a token bucket of scores: ``scores_per_s`` refill, ``burst`` capacity. A
request of n scores takes n tokens or is refused at once with 429 and ``Retry-After`` (the
seconds until n tokens are back); nothing is queued, so a heavy tenant's backlog never sits in
front of another tenant's commit. Buckets live in each replica's memory: with R replicas behind
a load balancer a tenant gets at most R times its rate (documented in docs/service.md). The
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

from .errors import DomainError


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
        if n > cap:
            raise RateLimited(f"scores: a request of {n} scores exceeds tenant {tenant!r}'s burst of "
                              f"{limits.burst}; send smaller batches.", retry_after_s=1.0)
        wait = (n - tokens) / rate
        raise RateLimited(f"Tenant {tenant!r} is over its rate of {rate:g} scores/s; retry in {wait:.2f} s.",
                          retry_after_s=wait)


    def check_not_empty(self, tenant: str, limits: Limits) -> None:
        """Raise :class:`RateLimited` if the bucket holds less than one token, without taking
        any: lets the fast path refuse a flooding tenant before parsing its body."""
        with self._lock:
            found = self._state.get(tenant)
            if found is None:
                return
            tokens = min(float(limits.burst), found[0] + (self.clock() - found[1]) * limits.scores_per_s)
        if tokens < 1:
            wait = (1 - tokens) / limits.scores_per_s
            raise RateLimited(f"Tenant {tenant!r} is over its rate of {limits.scores_per_s:g} scores/s; "
                              f"retry in {wait:.2f} s.", retry_after_s=wait)


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` takes whole seconds: round up, at least 1."""
    return str(max(1, math.ceil(seconds)))
