"""What one running service holds: settings, store, adapters, metrics, worker."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from functools import partial

from . import phases, tokens
from .domain import hash_token, tenant_policy
from .fairness import Limits as FairLimits
from .fairness import SharedTokenBuckets, TokenBuckets, effective
from .flight import Refresher, SingleFlight
from .metrics import ServiceMetrics
from .revocation import TenantWatch
from .scopes import TenantScope, parse_scope
from .settings import ServiceSettings
from .store import Limits, Store, open_store
from .store.migrate import require_head
from .store.notify import can_listen
from .targets import AdapterRegistry
from .worker import RetryPolicy, Worker


class Changes:
    """When each tenant's cached state was last dropped (bounded), so that a cache does not keep
    the answer of a read that began before the drop: that read may predate the change."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._at: dict[str, float] = {}
        self._all = -math.inf  # when every tenant's state was last dropped

    def mark(self, tenant: str) -> None:
        if len(self._at) >= self.max_entries:
            self.mark_all()
        self._at[tenant] = time.monotonic()

    def mark_all(self) -> None:
        self._at.clear()
        self._all = time.monotonic()

    def since(self, tenant: str, began: float) -> bool:
        """Whether ``tenant``'s state was dropped at or after ``began`` (``time.monotonic()``)."""
        return began <= max(self._at.get(tenant, -math.inf), self._all)


#: an entry used in the last fifth of its time (by default) is read again ahead of its expiry
AHEAD = 0.2


class TokenCache:
    """Tenant tokens this replica has seen, by their sha256 (never the token itself), bounded, each
    trusted for ``ttl_s`` seconds after the database last said it was valid, and never past the
    end of a rotation's grace. A rotation or revocation anywhere makes every replica forget the
    tenant's entries at once (:meth:`forget_tenant`, called by :class:`.revocation.TenantWatch`
    on PostgreSQL and by the route on this replica); ``ttl_s`` is the bound for a replica that
    did not hear of it (its listening connection was down). The common request costs a
    dictionary lookup and a clock read, never a database read.

    With a ``store``, a token used in the last ``ahead_s`` seconds of its trust is read again
    on a thread of its own, so a busy tenant's requests never all fall to the slow path when
    its entry expires (the read's answer replaces the entry under the same rules). Concurrent
    lookups of one token make one database read (:class:`.flight.SingleFlight`)."""

    def __init__(self, ttl_s: float = 5.0, max_entries: int = 10_000, store: Store | None = None,
                 ahead_s: float | None = None) -> None:
        self.ttl_s, self.max_entries, self.store = ttl_s, max_entries, store
        self.ahead_s = AHEAD * ttl_s if ahead_s is None else ahead_s
        self._by_hash: dict[str, tuple[str, float]] = {}  # digest -> (tenant, trusted until)
        self._changes = Changes(max_entries)
        self._lock = threading.Lock()
        self._flight: SingleFlight[tuple[tuple[str, float | None] | None, float]] = SingleFlight()
        self._refresh = Refresher("evalstop-token-refresh")

    def get(self, token: str) -> str | None:
        digest = hash_token(token)
        found = self._by_hash.get(digest)
        if found is None:
            return None
        left = found[1] - time.monotonic()
        if left <= 0:
            return None
        if left < self.ahead_s and self.store is not None:
            self._refresh.ahead(digest, partial(self.load, self.store, token))
        return found[0]

    def miss_kind(self, token: str) -> str:
        """Why :meth:`get` missed: ``"expired"`` (it was cached) or ``"first"`` (phase log)."""
        return "expired" if hash_token(token) in self._by_hash else "first"

    def load(self, store: Store, token: str) -> str | None:
        """The tenant of ``token`` as the database says now (cached), or None. A caller that
        joined another's read takes its answer unless the tenant changed since that read began
        (a revocation heard meanwhile): then it reads again itself."""
        began = time.monotonic_ns()
        (found, checked_at), shared = self._flight.do(hash_token(token), partial(self._read, store, token))
        if shared and found is not None and self._changes.since(found[0], checked_at):
            found, _ = self._read(store, token)
        phases.since("token", began)
        return None if found is None else found[0]

    def _read(self, store: Store, token: str) -> tuple[tuple[str, float | None] | None, float]:
        checked_at = time.monotonic()
        found = tokens.owner(store, token)
        if found is not None:
            self.put(token, found[0], checked_at, found[1])
        return found, checked_at

    def put(self, token: str, tenant: str, checked_at: float, valid_for_s: float | None = None) -> None:
        """Cache what the database said at ``checked_at`` (``time.monotonic()`` taken before the
        read) about a token valid for ``valid_for_s`` more seconds (None: no end). Not cached if
        the tenant's entries were dropped since ``checked_at``: the read may predate the change."""
        trusted = self.ttl_s if valid_for_s is None else min(self.ttl_s, valid_for_s)
        with self._lock:
            if self._changes.since(tenant, checked_at):
                return
            if len(self._by_hash) >= self.max_entries:
                self._by_hash.clear()
            self._by_hash[hash_token(token)] = (tenant, checked_at + trusted)

    def forget_tenant(self, tenant: str) -> None:
        """Drop every cached token of ``tenant`` (its token was rotated or revoked)."""
        with self._lock:
            self._changes.mark(tenant)
            for digest in [d for d, (t, _) in self._by_hash.items() if t == tenant]:
                del self._by_hash[digest]

    def clear(self) -> None:
        """Drop every entry (changes may have been missed)."""
        with self._lock:
            self._changes.mark_all()
            self._by_hash.clear()


@dataclass(frozen=True)
class Policy:
    """A tenant's scope and limits as this replica knows them."""

    scope: TenantScope | None
    limits: FairLimits


class PolicyCache:
    """Tenants' scopes and quotas, each trusted ``ttl_s`` seconds after it was read; dropped at
    once when the tenant changes (:meth:`forget`, as :class:`TokenCache`), so ``ttl_s`` bounds
    only a replica that did not hear of the change. As :class:`TokenCache`: read again ahead
    of expiry when used in its last ``ahead_s`` seconds, and one read in flight per tenant."""

    def __init__(
        self, store: Store, defaults: FairLimits, ttl_s: float, ahead_s: float | None = None
    ) -> None:
        self.store, self.defaults, self.ttl_s = store, defaults, ttl_s
        self.ahead_s = AHEAD * ttl_s if ahead_s is None else ahead_s
        self._items: dict[str, tuple[Policy, float]] = {}  # tenant -> (policy, read at)
        self._changes = Changes(100_000)
        self._lock = threading.Lock()
        self._flight: SingleFlight[tuple[Policy, float]] = SingleFlight()
        self._refresh = Refresher("evalstop-policy-refresh")

    def cached(self, tenant: str) -> Policy | None:
        with self._lock:
            found = self._items.get(tenant)
        if found is None:
            return None
        age = time.monotonic() - found[1]
        if age >= self.ttl_s:
            return None
        if age > self.ttl_s - self.ahead_s:
            self._refresh.ahead(tenant, partial(self.load, tenant))
        return found[0]

    def load(self, tenant: str) -> Policy:
        """The tenant's policy as the database says now (cached); a shared read is taken as
        :meth:`TokenCache.load` takes one."""
        phases.note("policy", "expired" if tenant in self._items else "first")
        began_ns = time.monotonic_ns()
        (policy, began), shared = self._flight.do(tenant, partial(self._read, tenant))
        if shared and self._changes.since(tenant, began):
            policy, _ = self._read(tenant)
        phases.since("policy", began_ns)
        return policy

    def _read(self, tenant: str) -> tuple[Policy, float]:
        began = time.monotonic()
        scope, quota = tenant_policy(self.store, tenant)
        policy = Policy(parse_scope(scope, stored=True), effective(quota, self.defaults))
        with self._lock:
            if not self._changes.since(tenant, began):
                if len(self._items) > 100_000:
                    self._items.clear()
                self._items[tenant] = (policy, began)
        return policy, began

    def get(self, tenant: str) -> Policy:
        return self.cached(tenant) or self.load(tenant)

    def forget(self, tenant: str) -> None:
        """Drop ``tenant``'s policy: the next request reads it (it just changed)."""
        with self._lock:
            self._changes.mark(tenant)
            self._items.pop(tenant, None)

    def clear(self) -> None:
        with self._lock:
            self._changes.mark_all()
            self._items.clear()


@dataclass
class ServiceContext:
    settings: ServiceSettings
    store: Store
    adapters: AdapterRegistry
    metrics: ServiceMetrics
    worker: Worker
    policies: PolicyCache
    tokens: TokenCache = field(default_factory=TokenCache)
    buckets: TokenBuckets = field(default_factory=TokenBuckets)
    #: hears other replicas' token and policy changes (PostgreSQL; None on SQLite)
    watch: TenantWatch | None = None

    def forget_tenant(self, tenant: str) -> None:
        """Drop what this replica caches of ``tenant``'s token and policy (it just changed)."""
        self.tokens.forget_tenant(tenant)
        self.policies.forget(tenant)

    def forget_all(self) -> None:
        self.tokens.clear()
        self.policies.clear()

    @classmethod
    def build(cls, settings: ServiceSettings) -> ServiceContext:
        limits = Limits(max_batch=settings.max_batch, max_step=settings.max_step,
                        max_history=settings.max_history, ingest_chunk=settings.ingest_chunk)
        store = open_store(settings.database_url, synchronous=settings.sqlite_synchronous, limits=limits,
                           group_commit=settings.sqlite_group_commit, migrate=settings.migrate_on_start,
                           db_threads=settings.db_threads)
        if not settings.migrate_on_start:
            try:
                require_head(store.engine)  # a migration job owns the schema: refuse any other
            except Exception:
                store.dispose()
                raise
        adapters = AdapterRegistry(settings.adapter_plugins, settings.adapter_settings)
        metrics = ServiceMetrics()
        retry = RetryPolicy(settings.worker_max_attempts, settings.backoff_base_s, settings.backoff_max_s)
        worker = Worker(store, adapters, retry=retry, lease_s=settings.worker_lease_s,
                        poll_s=settings.worker_poll_s, metrics=metrics, threads=settings.worker_threads,
                        per_tenant=settings.worker_per_tenant, sweep_s=settings.session_sweep_s)
        defaults = FairLimits(settings.tenant_scores_per_s, settings.tenant_burst,
                              settings.tenant_max_live_jobs)
        policies = PolicyCache(store, defaults, settings.policy_cache_s)
        # one bucket per tenant for all replicas on PostgreSQL; SQLite has one process
        buckets = SharedTokenBuckets(store) if store.shared else TokenBuckets()
        ctx = cls(settings, store, adapters, metrics, worker, policies, buckets=buckets,
                  tokens=TokenCache(settings.token_cache_s, store=store))
        if can_listen(store):
            ctx.watch = TenantWatch(store, ctx.forget_tenant, ctx.forget_all)
        return ctx
