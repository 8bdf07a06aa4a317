"""``cusum:hold=H``: a stop needs the alarm to hold for H of training progress (issue 20)."""

from __future__ import annotations

import json
import math

import pytest

from evalstop.detectors import Eval, Monitor, parse_spec, watch

N = 40
RISE = [0.1 + 0.05 * i for i in range(10)]  # to 0.55 at progress 0.25
PLATEAU = [0.55, 0.56, 0.55, 0.56, 0.55, 0.56]


def curve(scores: list[float]) -> list[Eval]:
    return [Eval(i + 1, s, (i + 1) / N) for i, s in enumerate(scores)]


#: a collapse of 6 evals (0.15 of progress) that recovers to the plateau
COLLAPSE = RISE + PLATEAU + [0.2] * 6 + [0.55, 0.56] * 9
#: a decline that persists to the end of the run
DECLINE = RISE + PLATEAU + [0.2] * 24
SPEC = "cusum:sigma=0.02,threshold=3,drift=2,n_warmup_evals=3"


def stop_progress(spec: str, scores: list[float]) -> float | None:
    verdict = parse_spec(spec).evaluate(curve(scores))
    return None if verdict.stop_index is None else (verdict.stop_index + 1) / N


def test_a_collapse_that_recovers_within_the_hold_is_not_stopped() -> None:
    assert stop_progress(SPEC, COLLAPSE) is not None  # without hold: stopped in the collapse
    assert stop_progress(SPEC + ",hold=0.2", COLLAPSE) is None


def test_a_persistent_decline_is_stopped_hold_later() -> None:
    plain = stop_progress(SPEC, DECLINE)
    held = stop_progress(SPEC + ",hold=0.2", DECLINE)
    assert plain is not None and held is not None
    assert held == pytest.approx(plain + 0.2)
    reason = parse_spec(SPEC + ",hold=0.2").evaluate(curve(DECLINE)).reason
    assert "held 0.2 of progress" in reason


def test_an_eval_back_near_the_best_ends_the_alarm() -> None:
    # the alarm starts, one eval comes back within drift sds of the best, then the fall resumes:
    # the span restarts at the resumed fall
    scores = RISE + PLATEAU + [0.2] * 3 + [0.55] + [0.2] * 20
    held = stop_progress(SPEC + ",hold=0.1", scores)
    plain = stop_progress(SPEC, RISE + PLATEAU + [0.2] * 24)
    assert held is not None and plain is not None and held > plain + 0.1


def test_an_eval_without_progress_never_completes_the_span() -> None:
    evals = [Eval(i + 1, s, None) for i, s in enumerate(DECLINE)]
    assert not parse_spec(SPEC + ",hold=0.1").evaluate(evals).stopped
    evals = [Eval(i + 1, s, math.nan if i > 17 else (i + 1) / N) for i, s in enumerate(DECLINE)]
    assert not parse_spec(SPEC + ",hold=0.1").evaluate(evals).stopped


def test_hold_is_checked() -> None:
    with pytest.raises(ValueError, match="hold"):
        parse_spec("cusum:hold=-0.1")
    with pytest.raises(ValueError, match="hold"):
        parse_spec("cusum:hold=1.5")


def test_state_round_trips_mid_alarm_and_the_evidence_says_so() -> None:
    monitor = Monitor(SPEC + ",hold=0.2,elevate=g", "adaptive:every=3,dense=1")
    evals = curve(DECLINE)
    for ev in evals[:20]:  # four evals into the fall: the alarm is on, not yet held
        monitor.observe(ev)
    assert monitor.state["alarm_since"] is not None and not monitor.fired
    again = Monitor.from_json(json.loads(json.dumps(monitor.to_json())))
    assert again.state == monitor.state and again.next_eval() == monitor.next_eval()
    assert monitor.elevated  # the alarm asks for every eval
    evidence = monitor.detector.evidence(monitor.state)
    assert "since progress" in evidence.label and "held 0.2" in evidence.band_label
    assert evidence.limit == 3.0
    # mid-alarm the next eval keeps it when more than drift (2) sds of 0.02 below the best, 0.56
    assert evidence.band == pytest.approx(0.56 - 2 * 0.02)
    assert "not yet held" in monitor.detector.running_reason(monitor.state)
    for ev in evals[20:]:
        monitor.observe(ev)
        again.observe(ev)
    assert monitor.fired and again.verdict == monitor.verdict


def test_sparse_and_adaptive_cadence_stop_the_decline_and_not_the_collapse() -> None:
    for cadence in ("every:3", "adaptive:every=3,dense=1"):
        decline = Monitor(SPEC + ",hold=0.2,elevate=g", cadence)
        watch(decline, curve(DECLINE))
        collapse = Monitor(SPEC + ",hold=0.2,elevate=g", cadence)
        watch(collapse, curve(COLLAPSE))
        assert decline.fired and not collapse.fired, cadence
