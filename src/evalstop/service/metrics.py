"""Prometheus metrics, one registry per app (no process-global collectors)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class ServiceMetrics:
    """The counters the service exports on ``/metrics``."""

    def __init__(self) -> None:
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

    def render(self) -> bytes:
        return generate_latest(self.registry)
