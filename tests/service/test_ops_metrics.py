"""The operational series: the outbox backlog read at scrape time, and rules that raise."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from evalstop.detectors import KDeclines
from evalstop.service.app import create_app

from ._support import ADMIN, Api, make_settings

DECLINING = [(1, 0.50), (2, 0.61), (3, 0.58), (4, 0.57)]  # k=2 fires at step 4


def series(api: Api, name: str) -> float:
    text = api.client.get("/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def stop_one(api: Api, token: str) -> str:
    job = api.job(token)
    for step, value in DECLINING:
        assert api.post(token, job["id"], {"step": step, "value": value}).status_code == 200
    return str(job["id"])


def test_the_backlog_gauge_counts_pending_deliveries(api_any_db: Api) -> None:
    api = api_any_db
    api.ctx.metrics.outbox_cache_s = 0.0
    token = api.tenant("acme")
    assert series(api, "evalstop_outbox_pending") == 0.0
    stop_one(api, token)
    stop_one(api, token)
    assert series(api, "evalstop_outbox_pending") == 2.0
    assert api.ctx.worker.run_once() == 2  # both delivered to the end (done): no longer pending
    assert series(api, "evalstop_outbox_pending") == 0.0
    stop_one(api, token)
    assert series(api, "evalstop_outbox_pending") == 1.0


def test_the_backlog_is_read_at_most_once_per_cache_period(api: Api) -> None:
    api.ctx.metrics.outbox_cache_s = 3600.0
    token = api.tenant("acme")
    assert series(api, "evalstop_outbox_pending") == 0.0
    stop_one(api, token)
    assert series(api, "evalstop_outbox_pending") == 0.0  # the cached reading
    api.ctx.metrics.outbox_cache_s = 0.0
    assert series(api, "evalstop_outbox_pending") == 1.0


def test_a_lost_database_reads_nan_and_the_scrape_still_answers(api: Api,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    api.ctx.metrics.outbox_cache_s = 0.0

    def lost(*_: Any) -> int:
        raise ConnectionError("database gone")

    monkeypatch.setattr("evalstop.service.store.delivery.pending_count", lost)
    assert series(api, "evalstop_outbox_pending") != series(api, "evalstop_outbox_pending")  # NaN


@pytest.fixture(params=[True, False], ids=["fast_path", "routes"])
def lenient(request: pytest.FixtureRequest, sqlite_url: str) -> Iterator[Api]:
    """The API answering a server error with a 500 instead of raising it into the test."""
    app = create_app(make_settings(sqlite_url, fast_path=request.param))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client)


def test_a_rule_that_raises_is_counted(lenient: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    api = lenient
    token = api.tenant("acme")
    job = api.job(token)
    assert api.post(token, job["id"], {"step": 1, "value": 0.5}).status_code == 200
    assert series(api, "evalstop_rule_errors_total") == 0.0

    def broken(self: KDeclines, state: Any, index: int, ev: Any) -> str | None:
        raise ZeroDivisionError("a rule's bug")

    monkeypatch.setattr(KDeclines, "step", broken)
    assert api.post(token, job["id"], {"step": 2, "value": 0.6}).status_code == 500
    assert api.post(token, job["id"], {"scores": [{"step": 2, "value": 0.6}]}).status_code == 500
    assert series(api, "evalstop_rule_errors_total") == 2.0
    monkeypatch.undo()
    ok = api.post(token, job["id"], {"step": 2, "value": 0.6})
    assert ok.status_code == 200 and ok.json()["accepted"] == 1  # nothing of the failed batch stored
    assert api.client.get("/metrics", headers=api.as_(ADMIN)).status_code == 200
