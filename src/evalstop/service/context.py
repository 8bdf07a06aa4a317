"""What one running service holds: settings, store, adapters, metrics, worker."""

from __future__ import annotations

from dataclasses import dataclass, field

from .domain import hash_token
from .metrics import ServiceMetrics
from .settings import ServiceSettings
from .store import Limits, Store, open_store
from .targets import AdapterRegistry
from .worker import RetryPolicy, Worker


class TokenCache:
    """Known tenant tokens, by their sha256 (never the token itself), bounded. Tokens are never
    revoked or reassigned in this version, so a hit is always still valid."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._by_hash: dict[str, str] = {}

    def get(self, token: str) -> str | None:
        return self._by_hash.get(hash_token(token))

    def put(self, token: str, tenant: str) -> None:
        if len(self._by_hash) >= self.max_entries:
            self._by_hash.clear()
        self._by_hash[hash_token(token)] = tenant


@dataclass
class ServiceContext:
    settings: ServiceSettings
    store: Store
    adapters: AdapterRegistry
    metrics: ServiceMetrics
    worker: Worker
    tokens: TokenCache = field(default_factory=TokenCache)

    @classmethod
    def build(cls, settings: ServiceSettings) -> ServiceContext:
        limits = Limits(max_batch=settings.max_batch, max_step=settings.max_step,
                        max_history=settings.max_history)
        store = open_store(settings.database_url, synchronous=settings.sqlite_synchronous, limits=limits,
                           group_commit=settings.sqlite_group_commit)
        adapters = AdapterRegistry(settings.adapter_plugins, settings.adapter_settings)
        metrics = ServiceMetrics()
        retry = RetryPolicy(settings.worker_max_attempts, settings.backoff_base_s, settings.backoff_max_s)
        worker = Worker(store, adapters, retry=retry, lease_s=settings.worker_lease_s,
                        poll_s=settings.worker_poll_s, metrics=metrics)
        return cls(settings, store, adapters, metrics, worker)
