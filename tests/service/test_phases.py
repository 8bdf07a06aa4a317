"""The phase log of the load benchmarks: bounded, keeps the slowest requests, counts the
collector's pauses, and is written by a running app only when asked for."""

from __future__ import annotations

import gc
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from evalstop.service import phases
from evalstop.service.app import create_app

from ._support import Api, make_settings


def _trace(total_ns: int) -> phases.Trace:
    trace = phases.Trace()
    trace.stamps = [("entry", 0), ("reply", total_ns)]
    return trace


def _fill(log: phases.SlowestLog, seed: int, n: int) -> list[float]:
    """Add ``n`` seeded traces; the log's size is checked after each. Their totals, slowest first (ms)."""
    rng = random.Random(seed)
    totals = [rng.randrange(1, 10**9) for _ in range(n)]
    for total in totals:
        log.add(_trace(total), total)
        assert len(log) <= log.cap
    return [t / 1e6 for t in sorted(totals, reverse=True)]


def test_the_log_keeps_exactly_the_slowest_one_percent() -> None:
    log = phases.SlowestLog(fraction=0.01, cap=2000, least=20)
    totals = _fill(log, 7, 30_000)
    assert [ms for ms, _ in log.slowest()] == totals[:300]


def test_the_log_never_holds_more_than_its_cap() -> None:
    log = phases.SlowestLog(fraction=0.5, cap=50, least=5)
    totals = _fill(log, 8, 20_000)  # half of them asked for, the slowest 50 kept
    assert len(log) == 50 and [ms for ms, _ in log.slowest()] == totals[:50]


def test_a_reset_forgets_what_came_before_it() -> None:
    log = phases.SlowestLog(least=2)
    log.add(_trace(10**9), 10**9)
    log.reset()  # as the SIGUSR1 handler does, between two adds
    log.add(_trace(5), 5)
    assert log.count == 1 and [ms for ms, _ in log.slowest()] == [5 / 1e6]


def test_phases_are_named_by_the_stamp_that_ends_them() -> None:
    trace = phases.Trace(due=1_000_000, sent=3_000_000)
    trace.stamps = [("entry", 4_000_000), ("loop", 4_500_000), ("database", 9_500_000), ("reply", 10_000_000)]
    assert trace.phases_ms() == {"client": 2.0, "queue": 1.0, "loop": 0.5, "database": 5.0, "reply": 0.5}


def test_gc_pauses_are_counted_per_generation_and_found_in_a_window() -> None:
    pauses = phases.GcPauses()
    gc.callbacks.append(pauses)
    try:
        before = pauses.windows[-1][2] if pauses.windows else 0
        gc.collect()  # a full collection: generation 2
    finally:
        gc.callbacks.remove(pauses)
    assert pauses.by_gen[2][0] >= 1 and pauses.by_gen[2][1] > 0
    gen, start, end = pauses.windows[-1]
    assert gen == 2 and end > start > before
    ms, full = pauses.overlap(start - 10, end + 10)
    assert full == 1 and ms == pytest.approx((end - start) / 1e6)
    assert pauses.overlap(end + 1, end + 10**6) == (0.0, 0)


@pytest.fixture
def phase_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    out = tmp_path / "phases"
    monkeypatch.setenv(phases.ENV, str(out))
    yield out
    phases.uninstall()


def test_a_running_app_writes_its_slowest_requests_when_it_stops(phase_dir: Path, sqlite_url: str) -> None:
    with TestClient(create_app(make_settings(sqlite_url))) as client:
        api = Api(client)
        token = api.tenant("t")
        job = api.job(token)["id"]
        for step in range(30):
            headers = {**api.as_(token), "X-Evalstop-Due-Ns": "1"}  # due long ago: a client phase
            assert client.post(f"/v1/jobs/{job}/scores", json={"step": step, "value": 0.5},
                               headers=headers).status_code == 200
    report = json.loads(next(phase_dir.glob("phases-*.json")).read_text())
    assert report["requests"] == 30 and len(report["slowest"]) == 20  # at least 20 kept
    row = report["slowest"][0]
    assert {"queue", "loop", "admit", "hand_back", "reply"} <= set(row["phases"])
    assert row["total_ms"] == pytest.approx(sum(row["phases"].values()), rel=1e-3)
    assert "rule_ms" in row and set(report["gc"]) == {"0", "1", "2"}
    assert phases.RECORDER is None  # turned off with the app


def test_without_the_setting_nothing_is_recorded(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(phases.ENV, raising=False)
    with TestClient(create_app(make_settings(sqlite_url))) as client:
        assert phases.RECORDER is None
        api = Api(client)
        token = api.tenant("t")
        assert api.post(token, api.job(token)["id"], {"step": 1, "value": 0.5}).status_code == 200


def test_a_pause_counts_against_a_request_only_while_the_server_held_it(tmp_path: Path) -> None:
    recorder = phases.Recorder(tmp_path)
    trace = phases.Trace(due=0)
    trace.stamps = [("entry", 5_000_000), ("reply", 9_000_000)]
    recorder.add(trace)
    recorder.gc.windows.extend([(2, 1_000_000, 3_000_000), (0, 6_000_000, 7_500_000)])  # queued, then held
    (row,) = recorder.report()["slowest"]
    assert (row["gc_ms"], row["gc_full"]) == (1.5, 0)
    assert recorder.report()["phase_ms_sum"] == {"queue": 5.0, "reply": 4.0}
