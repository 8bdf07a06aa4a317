"""``cusum:elevate=g``: the adaptive cadence goes dense only once the statistic is up (issue 20)."""

from __future__ import annotations

import json

import pytest

from evalstop.detectors import Eval, Monitor, parse_spec, watch


def curve(scores: list[float]) -> list[Eval]:
    n = len(scores)
    return [Eval(i + 1, s, (i + 1) / n) for i, s in enumerate(scores)]


# a rise, a plateau that wobbles a little under its best, then a real decline
WOBBLE = [0.1, 0.3, 0.5, 0.6, 0.7, 0.69, 0.7, 0.695, 0.7, 0.69, 0.7, 0.695, 0.7, 0.69]
DECLINE = [0.6, 0.5, 0.4, 0.3, 0.2, 0.1]


def test_a_wobble_under_the_best_is_elevated_for_best_and_not_for_g() -> None:
    best = Monitor("cusum:threshold=3,drift=2", "adaptive:every=3,dense=1")
    g = Monitor("cusum:threshold=3,drift=2,elevate=g", "adaptive:every=3,dense=1")
    for ev in curve(WOBBLE)[:6]:  # the 6th eval is 0.01 under the best: a wobble
        best.observe(ev)
        g.observe(ev)
    assert best.elevated and best.next_eval().after == 1
    assert g.state["g"] == 0.0 and not g.elevated and g.next_eval().after == 3


def test_elevate_g_asks_for_fewer_evals_and_still_stops_the_decline() -> None:
    evals = curve(WOBBLE + DECLINE)
    used = {}
    for elevate in ("best", "g"):
        monitor = Monitor(f"cusum:threshold=3,drift=2,elevate={elevate}", "adaptive:every=3,dense=1")
        used[elevate] = watch(monitor, evals)
        assert monitor.fired, elevate
        assert monitor.verdict.best_index is not None
    assert len(used["g"]) < len(used["best"])


def test_elevate_is_checked_and_round_trips() -> None:
    with pytest.raises(ValueError, match="elevate"):
        parse_spec("cusum:elevate=maybe")
    monitor = Monitor("cusum:elevate=g", "adaptive:every=3,dense=1")
    for ev in curve(WOBBLE):
        monitor.observe(ev)
    again = Monitor.from_json(json.loads(json.dumps(monitor.to_json())))
    assert again.elevated == monitor.elevated and again.next_eval() == monitor.next_eval()
