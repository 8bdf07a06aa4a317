"""Monitor: one job's rule state, best eval and checkpoint; fires once; JSON round trip."""

from __future__ import annotations

import json
import math

import pytest

from evalstop import DEFAULT_SPEC, Eval, Monitor
from evalstop.detectors import KDeclines, parse_spec


def test_fires_exactly_once_and_keeps_the_best_checkpoint() -> None:
    monitor = Monitor(KDeclines(k=2))
    fired_now = []
    for step, score in [(1, 0.1), (2, 0.5), (3, 0.4), (4, math.nan), (5, 0.3), (6, 0.9), (7, 0.1)]:
        monitor.observe(Eval(step, score), checkpoint=f"ck-{step}")
        fired_now.append(monitor.fired_now)
    assert fired_now == [False, False, False, False, True, False, False]
    verdict = monitor.verdict
    assert (verdict.stop_step, verdict.best_step, verdict.n_invalid) == (5, 2, 1)
    assert monitor.best_checkpoint == "ck-2" and monitor.fired and monitor.n_ignored == 2


def test_a_repeated_or_backwards_step_is_ignored_and_counted() -> None:
    monitor = Monitor(KDeclines(k=1))
    monitor.observe(Eval(10, 0.5), "ck-10")
    before = monitor.to_json()
    for step in (10, 5):
        verdict = monitor.observe(Eval(step, 0.1))  # would fire if it counted
        assert not verdict.stopped and not monitor.fired_now
    assert monitor.n_ignored == 2 and monitor.state == before["state"] and monitor.last_step == 10
    assert not monitor.accepts(10) and monitor.accepts(11)


def test_observe_many_equals_observe_one_by_one() -> None:
    evals = [Eval(s, v) for s, v in enumerate([0.1, 0.4, 0.4, 0.3, 0.2, 0.5, 0.1], start=1)]
    checkpoints = [f"ck-{ev.step}" for ev in evals]
    one, many = Monitor("evalstop:k=2"), Monitor("evalstop:k=2")
    for ev, ck in zip(evals, checkpoints, strict=True):
        one.observe(ev, ck)
    many.observe_many(evals, checkpoints)
    assert one.verdict == many.verdict and one.best_checkpoint == many.best_checkpoint == "ck-2"
    assert many.fired_now and one.n_ignored == many.n_ignored == 2


def test_json_round_trip_and_the_default_rule() -> None:
    monitor = Monitor()
    assert monitor.detector == parse_spec(DEFAULT_SPEC)
    for step in range(1, 30):
        monitor.observe(Eval(step, 0.5 + 0.01 * math.sin(step)), checkpoint=f"ck-{step}")
    text = json.dumps(monitor.to_json(), allow_nan=False)
    again = Monitor.from_json(text)
    assert again == monitor and again.best_checkpoint == monitor.best_checkpoint
    assert again.observe(Eval(30, 0.1)) == monitor.observe(Eval(30, 0.1))


def test_from_json_refuses_another_rule_or_a_broken_state() -> None:
    saved = Monitor("evalstop:k=2").to_json()
    with pytest.raises(ValueError, match="runs detector 'evalstop', not 'evalstop:k=3'"):
        Monitor.from_json(saved, "evalstop:k=3")
    broken = {**saved, "state": {"n": 0}}
    with pytest.raises(ValueError, match="must have the keys"):
        Monitor.from_json(broken)
    with pytest.raises(ValueError, match="to_json\\(\\) dict of format 1"):
        Monitor.from_json({"format": 99})
    with pytest.raises(TypeError, match="Monitor needs a Detector or a spec string"):
        Monitor(3)  # type: ignore[arg-type]
