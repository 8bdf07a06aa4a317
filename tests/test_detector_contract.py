"""Every registered detector passes the contract in ``evalstop.testing``; the contract itself
catches detectors that break it."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalstop.detectors import REGISTRY, Decision, Detector, Eval, KDeclines, Monitor, Verdict, parse_spec
from evalstop.detectors._base import State, is_valid, offer
from evalstop.testing import (
    FIXED_HISTORIES,
    ContractError,
    check_best,
    check_corruption,
    check_detector,
    check_frozen,
    check_incremental,
    check_prefixes,
    check_state_bounded,
)

NAN, INF = math.nan, math.inf

SPECS = [
    *REGISTRY,
    "evalstop:k=1",
    "evalstop:k=3,n_warmup_evals=2",
    "evalstop:against=best,min_delta=0.05,mode=min",
    "never:mode=min",
    "fixed-progress:at=0.3,mode=min",
    "loss-plateau:patience=1,n_warmup_evals=0,min_rel_delta=0",
    "slaq:window=1,n_warmup_evals=0,threshold=0.3",
    "cusum:per=0.1,warmup=0.2,sigma_from=best,n_warmup_evals=1",
    "cusum:threshold=1,per=0.2,warmup=0.1,n_warmup_evals=2,elevate=g,hold=0.15",
]

bad_floats = st.sampled_from([NAN, INF, -INF])
score_values = st.one_of(
    st.floats(-1.0, 2.0), st.sampled_from([0.0, 0.5, 1.0]), bad_floats
)  # repeated values exercise ties
loss_steps = st.one_of(st.floats(-0.5, 0.2), st.just(0.0))
optional_bad = st.one_of(st.none(), bad_floats)


@st.composite
def histories(draw: st.DrawFn, max_size: int = 14) -> list[Eval]:
    n = draw(st.integers(0, max_size))
    steps = list(accumulate(draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))))
    progress = sorted(draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    loss = list(
        accumulate(draw(st.lists(loss_steps, min_size=n, max_size=n)), initial=draw(st.floats(0.0, 3.0)))
    )
    evals = []
    for i in range(n):
        p: float | None = progress[i] if draw(st.integers(0, 9)) else draw(optional_bad)
        lo: float | None = loss[i + 1] if draw(st.integers(0, 9)) else draw(optional_bad)
        evals.append(Eval(step=steps[i], score=draw(score_values), progress=p, loss=lo))
    return evals


@pytest.mark.parametrize("spec", SPECS)
def test_detector_passes_contract_on_fixed_histories(spec: str) -> None:
    check_detector(parse_spec(spec))


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=60, deadline=None)
@given(evals=histories())
def test_detector_passes_contract_on_generated_histories(spec: str, evals: list[Eval]) -> None:
    check_detector(parse_spec(spec), [evals, tuple(evals)])


@pytest.mark.parametrize("spec", [*SPECS, "mann-kendall:max_window=6", "cusum:min_delta=0"])
def test_state_stays_bounded_on_a_long_noisy_curve(spec: str) -> None:
    check_state_bounded(parse_spec(spec))


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=40, deadline=None)
@given(evals=histories(max_size=40), data=st.data())
def test_monitor_round_trip_mid_stream_and_nan_tail_never_fires(
    spec: str, evals: list[Eval], data: st.DataObject
) -> None:
    """A Monitor saved as JSON at a random eval decides as one that never stopped; a run of
    NaN scores after any prefix never fires it."""
    detector = parse_spec(spec)
    cut = data.draw(st.integers(0, len(evals)))
    whole = Monitor(detector)
    whole.observe_many(evals)
    resumed = Monitor(detector)
    resumed.observe_many(evals[:cut])
    resumed = Monitor.from_json(json.dumps(resumed.to_json(), allow_nan=False))
    resumed.observe_many(evals[cut:])
    assert resumed.verdict == whole.verdict == detector.evaluate(evals)
    nan_tail = Monitor(detector)
    nan_tail.observe_many(evals[:cut])
    was_fired = nan_tail.fired
    last = evals[cut - 1].step if cut else 0
    for j in range(1, 6):
        nan_tail.observe(Eval(last + j, data.draw(bad_floats), progress=None, loss=None))
        assert nan_tail.fired == was_fired and not nan_tail.fired_now


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_registered_detector_is_default_constructible_and_frozen(name: str) -> None:
    check_frozen(REGISTRY[name]())


def test_fixed_histories_trip_every_rule_but_never() -> None:
    """Guard against a vacuous contract run: the fixed histories trip every rule but 'never'."""
    for name, cls in REGISTRY.items():
        fired = [cls().evaluate(h).stopped for h in FIXED_HISTORIES]
        assert any(fired) == (name != "never"), name


# ---- the contract catches broken detectors -----------------------------------------------------


@dataclass(frozen=True)
class FiresOnNaN(Detector):
    """Broken: treats a failed eval as a reason to stop."""

    name = "fires-on-nan"

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        if not is_valid(ev.score):
            state["n_invalid"] += 1
            return "nan"
        offer(state, 1.0, index, ev)
        return None


@dataclass(frozen=True)
class LooksAtTheEnd(Detector):
    """Broken: decides from the length of the whole history, so prefixes disagree."""

    name = "looks-at-the-end"

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        if len(evals) >= 3:
            return Verdict(Decision.STOP, "long", 0, evals[0].step)
        return Verdict(Decision.CONTINUE, "")

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        return None


@dataclass(frozen=True)
class WrongBest(KDeclines):
    """Broken: reports the last score as the best."""

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        verdict = super().evaluate(evals)
        last = evals[-1] if evals else None
        return Verdict(
            verdict.decision,
            verdict.reason,
            verdict.stop_index,
            verdict.stop_step,
            best_score=None if last is None else last.score,
        )


class Mutable(Detector):
    name = "evalstop"

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        return KDeclines().step(state, index, ev)


HISTORY = [Eval(10, 0.5), Eval(20, 0.6), Eval(30, NAN), Eval(40, 0.4)]


def test_contract_catches_a_rule_that_fires_on_nan() -> None:
    with pytest.raises(ContractError, match="score=nan at eval 0 made the rule fire"):
        check_corruption(FiresOnNaN(), HISTORY[:2])


def test_contract_catches_prefix_disagreement() -> None:
    with pytest.raises(ContractError, match="prefix of 1 evals"):
        check_prefixes(LooksAtTheEnd(), HISTORY)


def test_contract_catches_a_wrong_best_checkpoint() -> None:
    with pytest.raises(ContractError, match="best checkpoint"):
        check_best(WrongBest(), HISTORY)


def test_contract_catches_a_mutable_detector() -> None:
    with pytest.raises(ContractError, match="must be a dataclass"):
        check_frozen(Mutable())


@dataclass(frozen=True)
class Hoarder(KDeclines):
    """Broken: keeps every score in its state."""

    def rule_state(self) -> State:
        return {**super().rule_state(), "all": []}

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        state["all"].append(ev.score)
        return super().step(state, index, ev)


def test_contract_catches_a_state_that_grows_with_the_history() -> None:
    with pytest.raises(ContractError, match="state_window=0"):
        check_state_bounded(Hoarder(k=10**6), n=50)


def test_contract_catches_a_state_that_is_not_json() -> None:
    @dataclass(frozen=True)
    class Tupled(KDeclines):
        def rule_state(self) -> State:
            return {**super().rule_state(), "bad": math.nan}

    with pytest.raises(ContractError, match="not JSON without NaN"):
        check_incremental(Tupled(), HISTORY)


def test_contract_catches_update_that_mutates_its_input() -> None:
    @dataclass(frozen=True)
    class InPlace(KDeclines):
        def update(self, state: State, ev: Eval) -> tuple[State, Verdict]:
            self.advance(state, ev)
            return state, self.verdict(state)

    with pytest.raises(ContractError, match="update changed the state"):
        check_incremental(InPlace(), HISTORY)


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=30, deadline=None)
@given(rows=st.lists(histories(max_size=12), min_size=1, max_size=6))
def test_a_batch_fold_where_a_rule_has_one_is_evaluate_on_every_row(
    spec: str, rows: list[list[Eval]]
) -> None:
    import numpy as np

    detector = parse_spec(spec)
    width = max(len(r) for r in rows)
    scores = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        scores[i, :len(row)] = [e.score for e in row]
    planned = detector.fold_rows(scores)
    if planned is None:
        return  # no batch form: the simulator folds a Monitor per job
    for i, row in enumerate(rows):
        # a row shorter than the matrix ends in NaN, which never fires and never becomes the best
        padded = [*row, *(Eval(len(row) + j + 1, float("nan")) for j in range(width - len(row)))]
        verdict = detector.evaluate([Eval(j + 1, e.score) for j, e in enumerate(padded)])
        stop = -1 if verdict.stop_index is None else verdict.stop_index
        assert int(planned[0][i]) == stop
        if stop >= 0:
            assert int(planned[1][i]) == verdict.best_index
