"""deploy/grafana/evalstop-dashboard.json queries only metrics and labels the service exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from evalstop.service.metrics import ServiceMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "evalstop-dashboard.json"


def exported() -> dict[str, set[str]]:
    """Every sample name /metrics exposes, with its label names (each labelled metric touched once)."""
    m = ServiceMetrics()
    m.decisions.labels(source="detector", shadow="false").inc()
    m.stops_enforced.labels(target="ray").inc()
    m.adapter_errors.labels(target="ray", retryable="true").inc()
    m.ingest_latency.observe(0.001)
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(m.render().decode()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_every_query_names_an_exported_metric_and_label() -> None:
    dash = json.loads(DASHBOARD.read_text())
    samples = exported()
    exprs = [(t["expr"], t.get("legendFormat", "")) for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    for expr, legend in exprs:
        metrics = set(re.findall(r"\bevalstop_[a-z_]+", expr))
        assert metrics, expr
        for name in metrics:
            assert name in samples, f"{name} (in {expr!r}) is not exported; exported: {sorted(samples)}"
        labels = set().union(*(samples[n] for n in metrics)) | {"job", "le"}
        for group in re.findall(r"by \(([^)]*)\)", expr):
            assert {g.strip() for g in group.split(",")} <= labels, expr
        assert set(re.findall(r"{{(\w+)}}", legend)) <= labels, legend
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "job"}
