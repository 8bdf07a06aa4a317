"""The noisy-eval TRL GRPO bank (issue 20, item 6): a 48-prompt watched eval against a 1,024-sample
gold, and runs whose reward is negated for a window of steps (a transient collapse that recovers)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalstop.experiments.cadence_policy import bank_of
from evalstop.workloads.bank import build_trl_bank, shipped_trl_bank
from evalstop.workloads.trl_runs import NOISY_BASE, NOISY_FAMILIES, SHIPPED_NOISY, TrlConfig, family_runs

RUNS = shipped_trl_bank(noisy=True)
ATOL = 1e-4


def family(name: str) -> list:  # type: ignore[type-arg]
    return [r for r in RUNS if r.family == name]


def test_shipped_runs_cover_every_noisy_family_and_record_their_command() -> None:
    meta = json.loads((SHIPPED_NOISY / "meta.json").read_text())
    assert meta["command"].startswith("evalstop bank --trainer trl-noisy --seed 0 --runs-per-family ")
    assert meta["trainer"] == "trl-noisy" and "trl" in meta["versions"]
    assert {r.family for r in RUNS} == set(NOISY_FAMILIES)
    assert len(RUNS) == meta["n_runs"] == meta["runs_per_family"] * len(NOISY_FAMILIES)
    assert all(len(ev.items) == NOISY_BASE["eval_prompts"] for r in RUNS for ev in r.evals)
    assert {bank_of(r.family) for r in RUNS} == {"trl-noisy"}
    assert bank_of("trl-proxy") == "trl" and bank_of("base") == "numpy"


def test_the_reward_flip_collapses_true_gold_inside_its_window_and_it_recovers() -> None:
    """``collapse-gold``: true gold falls by at least 0.2 below its running best within the
    fault window (or just after), and climbs back to within 0.1 of that best by the end."""
    config = TrlConfig().with_(**NOISY_FAMILIES["collapse-gold"])
    for run in family("collapse-gold"):
        gold = np.array(run.truth.true_gold)
        steps = np.array([ev.step for ev in run.evals])
        start, end = config.flip_start * config.n_steps, (config.flip_end + 0.1) * config.n_steps
        before = steps <= start
        during = (steps > start) & (steps <= end)
        best_before = gold[before].max()
        assert gold[during].min() < best_before - 0.2, run.job_id
        assert gold[-5:].max() > best_before - 0.1, run.job_id
    runs = family("collapse-gold")
    assert sum(r.truth.label == "healthy" for r in runs) >= len(runs) - 1


def test_flip_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match="flip_end"):
        TrlConfig(flip_start=0.5, flip_end=0.4)
    with pytest.raises(ValueError, match="flip_start"):
        TrlConfig(flip_start=-0.1)
    with pytest.raises(ValueError, match="noisy-nope"):
        family_runs("noisy-nope", 0, 1)


@pytest.mark.slow
def test_one_collapse_run_regenerates_as_shipped() -> None:
    pytest.importorskip("trl", reason="needs pip install 'evalstop[hf]'")
    (fresh,) = build_trl_bank(0, 1, ["collapse-gold"], noisy=True)
    (shipped,) = [r for r in RUNS if r.job_id == fresh.job_id]
    np.testing.assert_allclose([e.score for e in fresh.evals], [e.score for e in shipped.evals], atol=ATOL)
    np.testing.assert_allclose(fresh.truth.true_gold, shipped.truth.true_gold, atol=ATOL)
    assert fresh.truth.label == shipped.truth.label
