"""Harm-based validation: the Wilson interval, harmful false stops, per-bank and pooled rows."""

from __future__ import annotations

import math

import pytest

from evalstop.detectors import Eval
from evalstop.experiments import cadence_policy
from evalstop.experiments.cadence_policy import POOLED, Run, bank_rows
from evalstop.experiments.holdout import Case, Outcome, harmful, metrics
from evalstop.experiments.stats import rate_cell, wilson


def case(label: str, quality: list[float], family: str = "f") -> Case:
    evals = tuple(Eval(i + 1, q, progress=(i + 1) / len(quality)) for i, q in enumerate(quality))
    peak = max(range(len(quality)), key=quality.__getitem__)
    return Case(f"{family}-{label}-{len(quality)}", family, label, evals, tuple(quality), peak)


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"),
    [
        # 0 of 16: upper bound z^2 / (n + z^2) = 3.84146 / 19.84146
        (0, 16, 0.0, 0.193608),
        # 5 of 10: centre .5, half-width 1.96 * sqrt(.025 + .0096) / 1.3841
        (5, 10, 0.236593, 0.763407),
        # 1 of 58 (one harmful stop in the noisy bank), as scipy's binomtest(...).proportion_ci
        (1, 58, 0.003050, 0.091409),
        (16, 16, 0.806392, 1.0),
    ],
)
def test_wilson_matches_hand_computed_values(k: int, n: int, lo: float, hi: float) -> None:
    got = wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=2e-6)


def test_wilson_of_no_trials_is_undefined_and_bad_counts_are_refused() -> None:
    assert all(math.isnan(x) for x in wilson(0, 0))
    with pytest.raises(ValueError, match="k=3, n=2"):
        wilson(3, 2)
    assert rate_cell(0, 16) == "0.000 0/16 [0.000, 0.194]"
    assert rate_cell(0, 0) == "— 0/0"


# A healthy run rising from 0.2 to 1.0: rise 0.8, so a stop may cost up to 0.04.
RISING = case("healthy", [0.2, 0.5, 0.8, 0.97, 0.9, 0.99, 1.0])


def test_a_false_stop_far_below_the_end_is_harmful() -> None:
    # stopped at eval 3, delivering eval 2 (0.8): 0.2 below the end, 25 % of the rise
    assert harmful(RISING, 3, 2)


def test_a_false_stop_that_delivers_near_the_end_is_harmless() -> None:
    # stopped at eval 4, delivering eval 3 (0.97): 0.03 below the end, 3.75 % of the rise
    assert not harmful(RISING, 4, 3)
    assert not harmful(RISING, None, 2)  # not stopped
    assert not harmful(case("hacking", list(RISING.true_quality)), 3, 2)  # not a false stop


def test_a_run_with_no_rise_has_no_tolerance() -> None:
    flat = case("healthy", [0.5, 0.6, 0.4, 0.5])
    assert harmful(flat, 2, 2)  # 0.4 < 0.5 at the end
    assert not harmful(flat, 2, 1)  # 0.6 is better than the end


def test_metrics_count_harmful_stops_over_healthy_runs() -> None:
    other = case("healthy", [0.0, 1.0, 1.0, 1.0], family="g")
    m = metrics([RISING, other], [Outcome(3, 2), Outcome(2, 1)])
    assert (m["fp"], m["n_harmful"], m["fpr"], m["harmful"]) == (2.0, 1.0, 1.0, 0.5)


def test_bank_rows_pool_every_bank_and_the_table_prints_counts() -> None:
    numpy_run = case("healthy", [0.2, 0.5, 0.8, 0.97, 0.9, 0.99, 1.0], family="a")
    trl_run = case("healthy", [0.2, 0.5, 0.8, 0.97, 0.9, 0.99, 1.0], family="trl-b")
    cases = [numpy_run, trl_run]
    runs = {"s": {"every:1": [Run(4, 3, 2), Run(7, None, 6)]}}
    rows = bank_rows(cases, runs, {"numpy": "s", "trl": "s"}, ["every:1"])
    assert list(rows) == ["numpy", "trl", POOLED]
    assert (rows["numpy"]["every:1"]["n_harmful"], rows["trl"]["every:1"]["n_harmful"]) == (1.0, 0.0)
    pooled = rows[POOLED]["every:1"]
    assert (pooled["n_healthy"], pooled["fp"], pooled["n_harmful"], pooled["harmful"]) == (2.0, 1.0, 1.0, 0.5)
    text = cadence_policy.render({"spec": "s", "banks": rows})
    assert "| pooled | every:1 |" in text
    assert "0.500 1/2 [0.095, 0.905]" in text  # FPR and harmful: 1 of 2 healthy runs
