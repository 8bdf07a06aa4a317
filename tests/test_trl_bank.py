"""The real-trainer families of the bank (TRL GRPO, ``workloads/trl_runs.py``): the runs that ship
as package data, their labels, and one run regenerated in CI to match what ships."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalstop.detectors import DEFAULT_SPEC, parse_spec
from evalstop.workloads.bank import at_cadence, build_trl_bank, shipped_trl_bank
from evalstop.workloads.trl_runs import FAMILIES, SHIPPED, TrlConfig

RUNS = shipped_trl_bank()
#: The CSV keeps 6 significant digits; a regenerated run must agree to this (on CPU, one thread,
#: the same torch build gives bit-identical runs; other CPUs may differ in the last float bits).
ATOL = 1e-4


def family(name: str) -> list:  # type: ignore[type-arg]
    return [r for r in RUNS if r.family == name]


def test_shipped_runs_cover_every_family_and_record_their_command() -> None:
    meta = json.loads((SHIPPED / "meta.json").read_text())
    assert meta["command"].startswith("evalstop bank --trainer trl --seed 0 --runs-per-family ")
    assert meta["trainer"] == "trl" and "torch" in meta["versions"] and "trl" in meta["versions"]
    assert {r.family for r in RUNS} == set(FAMILIES)
    assert len(RUNS) == meta["n_runs"] == meta["runs_per_family"] * len(FAMILIES)
    config = TrlConfig()
    for run in RUNS:
        assert len(run.evals) == config.n_evals
        assert all(len(ev.items) == config.eval_prompts for ev in run.evals)
        assert run.evals[-1].step == config.n_steps and run.evals[-1].progress == 1.0


def test_the_watched_eval_is_noisy_and_the_gold_eval_is_not() -> None:
    """Tens of samples per watched eval: its error against the large gold eval is several
    hundredths; the gold curve itself moves smoothly between neighbouring evals of a flat run."""
    errors = [ev.score - g for r in RUNS for ev, g in zip(r.evals, r.truth.true_gold, strict=True)]
    assert 0.03 < float(np.std(errors)) < 0.3
    tiny = family("trl-lr-tiny")[0].truth.true_gold
    assert float(np.std(np.diff(tiny, 2))) < float(np.std(errors)) / 2


def test_optimising_the_proxy_overoptimises_and_optimising_gold_does_not() -> None:
    for run in family("trl-proxy"):
        peak = run.truth.peak_index
        assert run.truth.label == "hacking"
        assert run.proxy[-1] > run.proxy[peak]  # the proxy kept rising while gold fell
    controls = [r for r in RUNS if r.family.startswith("control")]
    assert controls and all(r.truth.label != "hacking" for r in controls)
    assert all(r.truth.true_peak > 0.3 for r in family("control-trl-gold"))  # gold is learnable


def test_runs_that_never_improve_and_slow_declines() -> None:
    # a reward model fit on biased labels points away from gold: gold never rises, then falls
    for run in family("trl-rm-biased"):
        assert run.truth.label == "hacking" and run.truth.true_peak < 0.05
    # too small a learning rate: a slow climb, never a decline
    assert all(r.truth.label == "healthy" for r in family("trl-lr-tiny"))
    # a smaller learning rate on the proxy peaks later than the base one
    slow = np.mean([r.truth.peak_progress for r in family("trl-proxy-slow")])
    assert slow > np.mean([r.truth.peak_progress for r in family("trl-proxy")])


def test_collapses_that_recover_are_healthy_and_the_default_tolerates_them() -> None:
    """Real RL: a high learning rate on gold collapses and recovers. The label says healthy, and
    the default rule lets those runs finish while it stops every run that optimises the proxy."""
    recovered = []
    for run in family("control-trl-gold-lr-high"):
        gold = np.array(run.truth.true_gold)
        drawdown = float((np.maximum.accumulate(gold) - gold).max())
        if run.truth.label == "healthy" and drawdown >= 0.1:
            recovered.append(run)
    assert recovered
    rule = parse_spec(DEFAULT_SPEC)
    assert all(rule.evaluate(r.evals).stop_index is None for r in recovered)
    assert all(rule.evaluate(r.evals).stop_index is not None for r in family("trl-proxy"))


def test_labels_survive_thinning_to_ten_evals() -> None:
    for run in RUNS:
        thin = at_cadence(run, 10)
        assert len(thin.evals) == 10 and thin.evals[-1] == run.evals[-1]
        if run.truth.label != "borderline" and thin.truth.label != "borderline":
            assert thin.truth.label == run.truth.label, run.job_id


@pytest.mark.slow
def test_one_run_regenerates_as_shipped() -> None:
    pytest.importorskip("trl", reason="needs pip install 'evalstop[hf]'")
    (fresh,) = build_trl_bank(0, 1, ["trl-proxy"])
    (shipped,) = [r for r in RUNS if r.job_id == fresh.job_id]
    np.testing.assert_allclose([e.score for e in fresh.evals], [e.score for e in shipped.evals], atol=ATOL)
    np.testing.assert_allclose(fresh.truth.true_gold, shipped.truth.true_gold, atol=ATOL)
    np.testing.assert_allclose(fresh.proxy, shipped.proxy, atol=ATOL)
    assert fresh.truth.label == shipped.truth.label
