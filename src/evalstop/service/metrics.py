"""Prometheus metrics, one registry per app (no process-global collectors)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger(__name__)


class ServiceMetrics:
    """The counters the service exports on ``/metrics``."""

    def __init__(self, outbox_cache_s: float = 5.0) -> None:
        self.outbox_cache_s = outbox_cache_s
        self._outbox_read_at: float | None = None
        self._outbox_lock = threading.Lock()
        self.registry = CollectorRegistry()
        self.scores_ingested = Counter(
            "evalstop_scores_ingested", "Eval scores stored (duplicates excluded).", registry=self.registry)
        self.decisions = Counter(
            "evalstop_decisions", "Stop decisions recorded.", ["source", "shadow"], registry=self.registry)
        self.stops_enforced = Counter(
            "evalstop_stops_enforced", "Stops delivered and reconciled.", ["target"], registry=self.registry)
        self.gpu_hours_reclaimed = Counter(
            "evalstop_gpu_hours_reclaimed",
            "GPU-hours freed by stops: gpus x (registered expected end - stop time).", registry=self.registry)
        self.adapter_errors = Counter(
            "evalstop_adapter_errors", "Adapter calls that failed.", ["target", "retryable"],
            registry=self.registry)
        self.ingest_latency = Histogram(
            "evalstop_ingest_seconds", "Time to store a batch of scores and decide.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), registry=self.registry)
        self.rule_errors = Counter(
            "evalstop_rule_errors", "Score batches refused because the job's rule raised on them.",
            registry=self.registry)
        self.outbox_pending = Gauge(
            "evalstop_outbox_pending", "Outbox rows not yet done or failed (read at scrape, cached "
            "outbox_cache_s; NaN when the database did not answer).", registry=self.registry)

    def refresh_outbox(self, count: Callable[[], int]) -> None:
        """Set the backlog gauge from ``count()`` (one database read) unless it was read less than
        ``outbox_cache_s`` ago; a failed read sets NaN (the readiness alert covers the database)."""
        with self._outbox_lock:
            now = time.monotonic()
            if self._outbox_read_at is not None and now - self._outbox_read_at < self.outbox_cache_s:
                return
            self._outbox_read_at = now
            try:
                self.outbox_pending.set(count())
            except Exception as exc:  # a lost database must not fail the scrape
                log.warning("metrics: outbox backlog not read (%s)", type(exc).__name__)
                self.outbox_pending.set(float("nan"))

    def render(self) -> bytes:
        return generate_latest(self.registry)
