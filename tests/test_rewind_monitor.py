"""Issue 23 (a): the on-detect policy and the Monitor's rewind."""

from __future__ import annotations

import json
import math

import pytest

from evalstop import Eval, Monitor
from evalstop.detectors import Correction, KDeclines, OnDetect

REWIND = OnDetect(on_detect="rewind", max_rewinds=1, correction="kl_coef*=2, lr*=0.5")


@pytest.mark.parametrize(("spec", "knob", "before", "after"), [
    ("kl_coef=0.05", "kl_coef", 0.5, 0.05),
    ("kl_coef*=2,lr*=0.5", "kl_coef", 0.1, 0.2),
    ("kl_coef*=2,lr*=0.5", "lr", 1e-3, 5e-4),
    ("lr=1e-4", "lr", 3.0, 1e-4),
])
def test_correction_specs_apply(spec: str, knob: str, before: float, after: float) -> None:
    change = Correction.parse(spec).get(knob)
    assert change is not None and math.isclose(change.apply(before), after)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"on_detect": "pause"}, "'on_detect' parameter of OnDetect must be one of 'rewind', 'stop'. Got 'pau"),
    ({"max_rewinds": -1}, "'max_rewinds' parameter of OnDetect must be an int >= 0 and <= 1000. Got -1"),
    ({"on_detect": "rewind", "correction": "temp=2"}, "unknown knob 'temp' in 'temp=2'. Valid knobs: kl_c"),
    ({"on_detect": "rewind", "correction": "lr*=-2"}, "finite factor > 0 for 'lr'. Got '-2' in 'lr\\*=-2'"),
    ({"on_detect": "rewind", "correction": "lr=0"}, "finite value > 0 for 'lr'. Got '0'"),
    ({"on_detect": "rewind", "correction": "kl_coef=nan"}, "finite value >= 0 for 'kl_coef'. Got 'nan'"),
    ({"on_detect": "rewind", "correction": "kl_coef"}, "malformed part 'kl_coef'"),
    ({"on_detect": "rewind", "correction": "lr*=2,lr=1"}, "changes 'lr' twice"),
    ({"on_detect": "rewind", "correction": "ref=init"}, "can only set 'ref' to one of best .*Got 'ref=init'"),
    ({"on_detect": "rewind", "correction": "ref*=2"}, "can only set 'ref' to one of best .*Got 'ref\\*=2'"),
    ({"on_detect": "rewind", "correction": "ref=best,ref=best"}, "changes 'ref' twice"),
    ({"on_detect": "rewind"}, "must name at least one change"),
    ({"correction": "lr*=0.5"}, "only used with on_detect='rewind'"),
])
def test_bad_policies_are_refused_naming_the_parameter(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OnDetect(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("spec", "ref", "kl"), [
    ("ref=best", "best", None), ("ref = best, kl_coef*=2", "best", "kl_coef*=2"),
    ("kl_coef=0.5", None, "kl_coef=0.5"),
])
def test_the_reference_reset_is_a_correction(spec: str, ref: str | None, kl: str | None) -> None:
    policy = OnDetect("rewind", correction=spec)
    parsed = policy.parsed
    assert parsed.ref == ref and str(parsed.get("kl_coef") or "") == (kl or "")
    assert parsed.get("ref") is None and parsed.get("lr") is None  # a reset is not a numeric change
    assert policy.correction == ",".join(x for x in ("ref=best" if ref else "", kl or "") if x)
    assert OnDetect.from_json(policy.to_json()) == policy


def test_policy_json_and_canonical_correction() -> None:
    assert REWIND.correction == "kl_coef*=2,lr*=0.5"
    assert OnDetect.from_json(REWIND.to_json()) == REWIND and OnDetect.from_json(None) == OnDetect()
    with pytest.raises(ValueError, match="Unknown on-detect policy parameter\\(s\\) \\['kl'\\]"):
        OnDetect.from_json({"on_detect": "rewind", "kl": 1})


def _feed(monitor: Monitor, points: list[tuple[int, float]]) -> list[bool]:
    fired = []
    for step, score in points:
        monitor.observe(Eval(step, score), checkpoint=f"ck-{step}")
        fired.append(monitor.fired_now)
    return fired


def test_rewind_restarts_the_rule_from_the_best_eval_then_stops() -> None:
    monitor = Monitor(KDeclines(k=2), policy=REWIND)
    assert _feed(monitor, [(1, 0.1), (2, 0.5), (3, 0.4), (4, 0.3)]) == [False, False, False, True]
    assert monitor.action == "rewind" and monitor.n_rewinds == 0
    rewind = monitor.rewind()
    done = (rewind.step, rewind.to_step, rewind.checkpoint, rewind.correction)
    assert done == (4, 2, "ck-2", "kl_coef*=2,lr*=0.5")
    # back to the state right after the best eval: the two declines no longer count
    assert not monitor.fired and monitor.n_evals == 2 and monitor.verdict.best_step == 2
    assert monitor.accepts(3)  # evals after the best eval are new evals
    # one decline after the rewind does not fire; a new best, then two declines fire: now a stop
    assert _feed(monitor, [(5, 0.45), (6, 0.6), (7, 0.55), (8, 0.5)]) == [False, False, False, True]
    assert monitor.action == "stop" and monitor.best_checkpoint == "ck-6"
    with pytest.raises(ValueError, match="the action is 'stop', not 'rewind'"):
        monitor.rewind()
    events = [(e["event"], e["step"]) for e in monitor.log]
    assert events == [("detect", 4), ("rewind", 4), ("detect", 8), ("stop", 8)]
    assert monitor.log[1]["checkpoint"] == "ck-2" and monitor.log[3]["checkpoint"] == "ck-6"


def test_the_stop_policy_logs_a_detection_and_a_stop_and_never_rewinds() -> None:
    monitor = Monitor(KDeclines(k=1))
    assert monitor.action is None and monitor.log == []
    _feed(monitor, [(1, 0.5), (2, 0.4)])
    assert monitor.action == "stop" and monitor.best_state is None
    assert [e["event"] for e in monitor.log] == ["detect", "stop"]
    with pytest.raises(ValueError, match="not 'rewind'"):
        monitor.rewind()


def test_a_rewound_monitor_round_trips_through_json_and_decides_the_same() -> None:
    monitor = Monitor("cusum:threshold=3.0,drift=1.0,n_warmup_evals=3", policy=REWIND)
    points = [(s, 0.5 + 0.03 * s + 0.01 * math.sin(7 * s)) for s in range(1, 9)]
    points += [(s, 0.74 - 0.06 * (s - 8)) for s in range(9, 16)]
    _feed(monitor, points)
    assert monitor.action == "rewind"
    monitor.rewind()
    _feed(monitor, [(16, 0.7), (17, 0.8)])
    text = json.dumps(monitor.to_json(), allow_nan=False)
    again = Monitor.from_json(text)
    assert again == monitor and again.policy == REWIND and again.n_rewinds == 1 and again.log == monitor.log
    tail = [(s, 0.8 - 0.08 * (s - 17)) for s in range(18, 26)]
    assert _feed(again, tail) == _feed(monitor, tail)
    assert again.action == monitor.action == "stop" and again.log == monitor.log


def test_observe_many_keeps_the_best_state_like_observe() -> None:
    points = [(1, 0.1), (2, 0.5), (3, 0.6), (4, 0.55), (5, 0.5)]
    one, many = Monitor(KDeclines(k=2), policy=REWIND), Monitor(KDeclines(k=2), policy=REWIND)
    _feed(one, points)
    many.observe_many([Eval(s, v) for s, v in points], [f"ck-{s}" for s, _ in points])
    assert one == many and one.best_state is not None and one.best_state["n"] == 3
    assert one.rewind() == many.rewind() and one == many
