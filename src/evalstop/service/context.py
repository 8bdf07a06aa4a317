"""What one running service holds: settings, store, adapters, metrics, worker."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from .domain import hash_token, tenant_policy
from .fairness import Limits as FairLimits
from .fairness import SharedTokenBuckets, TokenBuckets, effective
from .metrics import ServiceMetrics
from .scopes import TenantScope, parse_scope
from .settings import ServiceSettings
from .store import Limits, Store, open_store
from .store.migrate import require_head
from .targets import AdapterRegistry
from .worker import RetryPolicy, Worker


class TokenCache:
    """Tenant tokens this replica has seen, by their sha256 (never the token itself), bounded, each
    trusted for ``ttl_s`` seconds after the database last said it was valid. A token rotated out
    or revoked on another replica is therefore refused here within ``ttl_s`` (the request after
    that goes to the database once and caches again), at the cost of one lookup per token per
    ``ttl_s``, never one per request. A rotation or revocation on this replica forgets at once."""

    def __init__(self, ttl_s: float = 5.0, max_entries: int = 10_000) -> None:
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self._by_hash: dict[str, tuple[str, float]] = {}

    def get(self, token: str) -> str | None:
        found = self._by_hash.get(hash_token(token))
        return found[0] if found is not None and time.monotonic() - found[1] < self.ttl_s else None

    def put(self, token: str, tenant: str, checked_at: float) -> None:
        """Cache what the database said at ``checked_at`` (``time.monotonic()`` taken before the
        read: a rotation that lands during the read is still refused within ``ttl_s``)."""
        if len(self._by_hash) >= self.max_entries:
            self._by_hash.clear()
        self._by_hash[hash_token(token)] = (tenant, checked_at)

    def forget_tenant(self, tenant: str) -> None:
        """Drop every cached token of ``tenant`` (its token was just rotated or revoked here)."""
        for digest in [d for d, (t, _) in list(self._by_hash.items()) if t == tenant]:
            self._by_hash.pop(digest, None)


@dataclass(frozen=True)
class Policy:
    """A tenant's scope and limits as this replica knows them."""

    scope: TenantScope | None
    limits: FairLimits


class PolicyCache:
    """Tenants' scopes and quotas, read from the database at most every ``ttl_s`` seconds per
    tenant (an operator's change reaches every replica within that time)."""

    def __init__(self, store: Store, defaults: FairLimits, ttl_s: float) -> None:
        self.store, self.defaults, self.ttl_s = store, defaults, ttl_s
        self._items: dict[str, tuple[Policy, float]] = {}
        self._lock = threading.Lock()

    def cached(self, tenant: str) -> Policy | None:
        with self._lock:
            found = self._items.get(tenant)
        return found[0] if found is not None and time.monotonic() - found[1] < self.ttl_s else None

    def load(self, tenant: str) -> Policy:
        scope, quota = tenant_policy(self.store, tenant)
        policy = Policy(parse_scope(scope, stored=True), effective(quota, self.defaults))
        with self._lock:
            if len(self._items) > 100_000:
                self._items.clear()
            self._items[tenant] = (policy, time.monotonic())
        return policy

    def get(self, tenant: str) -> Policy:
        return self.cached(tenant) or self.load(tenant)


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
        return cls(settings, store, adapters, metrics, worker, policies, buckets=buckets,
                   tokens=TokenCache(settings.token_cache_s))
