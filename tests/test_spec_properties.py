"""Every spec the rule parser accepts runs: specs drawn from the parser's own parameter table
with extreme values, folded over 1,000 evals of random and extreme finite scores.

A spec the parser refuses must say which parameter and what range; one it accepts must never
raise later, whatever finite scores arrive: the Monitor folds them, reports its evidence and
next eval, and its state serialises as strict JSON (what the service stores on every score).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalstop.detectors import REGISTRY, Eval, Monitor, OnDetect, parse_cadence, parse_spec
from evalstop.detectors._cadence import POLICIES
from evalstop.detectors._noise import ItemEval

#: Finite floats a client may send, the worst first: the largest, the smallest normal and
#: subnormal magnitudes, zeros, and values near 1 apart by one ulp.
EXTREME_SCORES = (1e308, -1e308, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -5e-324,
                  sys.float_info.min, 0.0, -0.0, 1.0, 1.0 + 2**-52, 0.5, -1.0)
#: Parameter texts at and beyond any sane range (as a spec writes them).
EXTREME_NUMBERS = ("0", "1", "2", "3", "-1", "0.5", "1e-17", "1e-300", "5e-324", "1e-400", "1e308",
                   "1e400", "-1e308", "1" + "0" * 30, "9" * 400, "0.49999999", "1e-12", "64", "256")
WORDS = ("max", "min", "previous", "best", "all", "g", "true", "false", "nan", "inf", "x")


def _param_values(field: dataclasses.Field[Any]) -> st.SearchStrategy[str]:
    typename = str(field.type)
    if "bool" in typename:
        return st.sampled_from(("true", "false", "1", "2"))
    if "str" in typename:
        return st.sampled_from(WORDS)
    return st.one_of(st.sampled_from(EXTREME_NUMBERS), st.integers(-5, 10**6).map(str),
                     st.integers(1, 10).map(str), st.floats(0, 1).map(repr),
                     st.floats(allow_nan=False, allow_infinity=False).map(repr))


@st.composite
def specs(draw: st.DrawFn) -> str:
    """A spec of a registered rule with a few of its own parameters, each given an extreme value."""
    name = draw(st.sampled_from(sorted(REGISTRY)))
    fields = [f for f in dataclasses.fields(REGISTRY[name]) if f.init]  # type: ignore[arg-type]
    chosen = draw(st.lists(st.sampled_from(fields), max_size=4, unique_by=lambda f: f.name))
    return name + ("" if not chosen else ":" + ",".join(f"{f.name}={draw(_param_values(f))}" for f in chosen))


@st.composite
def cadences(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(POLICIES)))
    names = [f.name for f in dataclasses.fields(POLICIES[name])]  # type: ignore[arg-type]
    chosen = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
    values = st.sampled_from(("0", "1", "2", "3", "1000", "10000", "9" * 30, "9" * 194))
    return name + ("" if not chosen else ":" + ",".join(f"{n}={draw(values)}" for n in chosen))


def scores(n: int) -> st.SearchStrategy[list[float]]:
    finite = st.floats(allow_nan=False, allow_infinity=False)
    return st.lists(st.one_of(st.sampled_from(EXTREME_SCORES), finite, st.floats(0, 1)), min_size=n,
                    max_size=n)


def _accepted(spec: str) -> Any:
    try:
        return parse_spec(spec)
    except ValueError as exc:  # refused: the message names a parameter of the spec and its range
        text = str(exc)
        assert "Traceback" not in text and len(text.splitlines()) == 1, text
        return None


def run_monitor(spec: str, cadence: str, values: list[float], extra: list[float], *,
                moderate: bool = False) -> Monitor | None:
    """Fold 1,000 evals (``values`` cycled, with extreme progress, loss, stderr and items) into a
    Monitor for ``spec``; None if the parser refuses it."""
    detector = _accepted(spec)
    if detector is None:
        return None
    try:
        policy = parse_cadence(cadence)
    except ValueError:
        policy = parse_cadence("every:1")
    monitor = Monitor(detector, policy, eval_interval=2**53,
                      policy=OnDetect("rewind", 3, "kl_coef*=2") if len(values) % 2 else None)
    for i in range(1000):
        score = values[i % len(values)]
        other = extra[i % len(extra)]
        if i % 5 == 0:
            ev: Eval = ItemEval(i, score, min(abs(other), 1.0), other, abs(other), items=(score, other, 0.0))
        else:
            ev = Eval(i, score, (i + 1) / 1000, other, abs(other) if i % 3 else None)
        monitor.observe(ev, f"ckpt-{i}")
        evidence = monitor.evidence()
        monitor.next_eval()
        if moderate:  # what a job page draws: finite numbers for any accepted spec
            for number in (evidence.statistic, evidence.limit, evidence.band):
                assert number is None or math.isfinite(number), (spec, evidence)
        if monitor.action == "rewind":
            monitor.rewind()
    json.dumps(monitor.to_json(), allow_nan=False)
    Monitor.from_json(json.dumps(monitor.to_json(), allow_nan=False), detector)
    return monitor


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(spec=specs(), cadence=cadences(), values=scores(50), extra=scores(7))
def test_every_accepted_spec_runs_on_extreme_scores(spec: str, cadence: str, values: list[float],
                                                    extra: list[float]) -> None:
    run_monitor(spec, cadence, values, extra)


MODERATE = st.lists(st.one_of(st.sampled_from((0.0, 5e-324, -5e-324, 1e9, -1e9, 0.5)), st.floats(-1e9, 1e9)),
                    min_size=20, max_size=20)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(spec=specs(), values=MODERATE, extra=MODERATE)
def test_every_accepted_spec_gives_finite_evidence_on_moderate_scores(spec: str, values: list[float],
                                                                       extra: list[float]) -> None:
    run_monitor(spec, "adaptive", values, extra, moderate=True)


@settings(max_examples=200, deadline=None, database=None)
@given(cadence=cadences())
def test_every_accepted_cadence_names_a_step_that_fits_an_int64(cadence: str) -> None:
    try:
        policy = parse_cadence(cadence)
    except ValueError as exc:
        assert "must be an int" in str(exc) or "Unknown" in str(exc) or "dense" in str(exc), exc
        return
    assert 1 <= policy.after(True) <= 10_000 and 1 <= policy.after(False) <= 10_000


def test_the_issue_values_are_refused_naming_the_parameter_and_its_range() -> None:
    refused: dict[str, str] = {
        "noise-aware:n_items=1" + "0" * 400: "'n_items' parameter of NoiseAware must be an int >= 0 and <=",
        "mann-kendall:alpha=1e-17": "'alpha' parameter of MannKendall must be a finite number >= 1e-12",
        "paired:alpha=1e-17": "'alpha' parameter of Paired must be a finite number >= 1e-12",
        "cusum:hold=1e-400": "'hold' parameter of cusum: 1e-400 is too small to be told from 0 (the least",
        "evalstop:k=1" + "0" * 400: "'k' parameter of KDeclines must be an int >= 1 and <= 1000000",
        "patience:patience=" + "9" * 30: "'patience' parameter of Patience must be an int >= 1 and <=",
        "noise-aware:k=1" + "0" * 30: "'k' parameter of NoiseAware must be an int >= 1 and <=",
        "cusum:threshold=1e308,drift=1e308": "'threshold' parameter of Cusum must be a finite",
        "cusum:drift=1e400": "'drift' parameter of cusum: 1e400 is too large for a float",
    }
    for spec, message in refused.items():
        try:
            parse_spec(spec)
        except ValueError as exc:
            assert message in str(exc), (spec, str(exc))
        else:
            raise AssertionError(f"{spec!r} was accepted")
    assert parse_spec("cusum:hold=1e-6").hold == 1e-6  # type: ignore[attr-defined]
    for share in ("hold", "per"):
        try:
            parse_spec(f"cusum:{share}=1e-9")
        except ValueError as exc:
            assert f"'{share}' parameter of Cusum must be 0 (off) or a finite number >= 1e-06" in str(exc)
        else:
            raise AssertionError(f"{share}=1e-9 was accepted")


def test_a_cadence_past_its_range_is_refused_naming_it() -> None:
    for spec in ("every:" + "9" * 194, "every:10001", "adaptive:every=10001", "adaptive:dense=0"):
        try:
            parse_cadence(spec)
        except ValueError as exc:
            assert "must be an int >= 1 and <= 10000" in str(exc), (spec, str(exc))
        else:
            raise AssertionError(f"{spec!r} was accepted")
