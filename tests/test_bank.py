"""The RL curve bank: genuine overoptimisation dynamics, labels from the true gold curve,
reproducible CSV in the replay format, and bank curves inside a simulated workload."""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from evalstop import cli
from evalstop.detectors import ItemEval
from evalstop.replay import read_curves
from evalstop.workloads import WorkloadConfig, generate
from evalstop.workloads.bank import (
    BASE,
    bank_workload,
    build_bank,
    label_curve,
    read_bank,
    write_bank,
)
from evalstop.workloads.rl_toy import ToyConfig, fit_proxy, make_env, run_toy


def scores(runs: list) -> list[tuple[float, ...]]:
    return [tuple(ev.score for ev in r.evals) for r in runs]


# ---- reproducibility ------------------------------------------------------------------------------


def test_same_seed_same_bank_other_seed_other_bank() -> None:
    a = build_bank(3, 2, ["base", "control-gold"])
    b = build_bank(3, 2, ["base", "control-gold"])
    assert scores(a) == scores(b)
    assert [r.evals[-1].items for r in a] == [r.evals[-1].items for r in b]
    assert scores(build_bank(4, 2, ["base", "control-gold"])) != scores(a)


def test_adding_runs_or_families_never_changes_existing_runs() -> None:
    small = build_bank(0, 1, ["lr-high"])
    large = build_bank(0, 2, ["base", "lr-high"])
    assert scores(small) == scores([r for r in large if r.job_id == "lr-high-000"])


# ---- the dynamics are real overoptimisation -------------------------------------------------------


def test_pushing_harder_on_the_proxy_overoptimises_and_gold_control_does_not() -> None:
    hard = run_toy(BASE.with_(lr=0.4), 1)
    peak = int(np.argmax(hard.true_gold))
    assert hard.true_gold[peak] - hard.true_gold[-1] >= 0.05  # gold peaks, then falls ...
    assert hard.proxy[-1] > hard.proxy[peak]  # ... while the proxy keeps rising
    control = run_toy(BASE.with_(lr=0.4, target="gold"), 1)
    assert max(control.true_gold) - control.true_gold[-1] < 0.02


def test_a_strong_kl_penalty_keeps_the_policy_near_the_start() -> None:
    free = run_toy(BASE.with_(n_steps=100, n_evals=5), 2)
    tied = run_toy(BASE.with_(n_steps=100, n_evals=5, kl_coef=2.0), 2)
    assert abs(tied.proxy[-1]) < abs(free.proxy[-1])


def test_labeller_bias_is_what_the_proxy_learns() -> None:
    config = BASE.with_(n_comparisons=2000)
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(5).spawn(2)]
    env = make_env(config, rngs[0])
    fair = fit_proxy(config.with_(label_bias=0.0), env, np.random.default_rng(1))
    biased = fit_proxy(config, env, np.random.default_rng(1))
    hacks = env.hacks > 0
    # hack responses look worse than average to the fair proxy and better to the biased one
    assert fair[hacks].mean() < 0 < biased[hacks].mean()
    assert np.corrcoef(fair.ravel(), env.gold.ravel())[0, 1] > 0.8


def test_eval_sample_size_sets_the_eval_noise() -> None:
    def noise(config: ToyConfig) -> float:
        run = run_toy(config.with_(n_steps=60, n_evals=30, lr=0.05), 9)
        return float(np.std(np.array(run.scores) - np.array(run.true_gold)))

    small = noise(BASE.with_(eval_prompts=16, eval_samples=1))
    assert small > 2 * noise(BASE.with_(eval_prompts=256, eval_samples=8))


# ---- labels ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gold", "label"),
    [
        ([0.1, 0.5, 0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5, 0.5], "hacking"),
        ([0.1, 0.5, 0.9, 0.89, 0.9, 0.895, 0.9, 0.9, 0.9, 0.89], "healthy"),  # plateau
        ([0.1, 0.5, 0.9, 0.87, 0.87, 0.87, 0.87, 0.87, 0.87, 0.87], "borderline"),  # drop 0.03
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.8], "hacking"),  # peak at 90 %
        ([0.05 * i for i in range(1, 20)] + [0.8], "healthy"),  # peak at 95 %: after 90 %
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], "healthy"),
    ],
)
def test_label_curve(gold: list[float], label: str) -> None:
    assert label_curve(gold)[0] == label


def test_bad_config_values_are_named() -> None:
    lr_message = "'lr' parameter of ToyConfig must be a finite number > 0.0. Got 0"
    with pytest.raises(ValueError, match=re.escape(lr_message)):
        ToyConfig(lr=0)
    eval_message = "'eval_prompts' parameter of ToyConfig must be <= n_prompts=256. Got 300"
    with pytest.raises(ValueError, match=re.escape(eval_message)):
        ToyConfig(eval_prompts=300)
    with pytest.raises(ValueError, match=r"Unknown bank families \['nope'\]"):
        build_bank(0, 1, ["nope"])


# ---- files -----------------------------------------------------------------------------------------


def test_written_bank_reads_back_and_replays(tmp_path: Path) -> None:
    runs = build_bank(1, 1, ["base", "eval-small"])
    curves, truth = write_bank(runs, tmp_path)
    back = read_bank(tmp_path)
    assert [r.job_id for r in back] == [r.job_id for r in runs]
    for a, b in zip(runs, back, strict=True):
        assert b.truth.label == a.truth.label and b.truth.peak_index == a.truth.peak_index
        assert np.allclose([ev.score for ev in b.evals], [ev.score for ev in a.evals], rtol=1e-5)
        assert np.allclose(b.evals[-1].items, a.evals[-1].items, rtol=1e-4)
    with curves.open(newline="") as f:
        jobs = read_curves(csv.DictReader(f))  # the replay reader accepts the bank as is
    assert list(jobs) == [r.job_id for r in runs]
    assert all(len(jobs[r.job_id]) == len(r.evals) for r in runs)
    with truth.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {row["hacking"] for row in rows} <= {"true", "false"}


def test_bank_command_writes_a_table_and_files(tmp_path: Path) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(
            ["bank", "--runs-per-family", "1", "--families", "base,control-kl", "--out", str(tmp_path)]
        )
    assert code == 0
    assert "| control-kl | 1 |" in out.getvalue()
    assert (tmp_path / "curves.csv").is_file() and (tmp_path / "truth.csv").is_file()
    assert cli.main(["bank", "--families", "nope", "--out", str(tmp_path)]) == 2


# ---- into the simulator ----------------------------------------------------------------------------


def test_bank_workload_replaces_only_rlhf_curves_deterministically() -> None:
    workload = generate(WorkloadConfig(n_jobs=40), seed=0)
    runs = build_bank(0, 1, ["lr-high", "control-gold"])
    mixed = bank_workload(workload, runs, seed=7)
    again = bank_workload(workload, runs, seed=7)
    assert mixed == again
    by_evals = {tuple(ev.score for ev in r.evals): r for r in runs}
    for old, new, truth in zip(workload.jobs, mixed.jobs, mixed.truth, strict=True):
        assert dataclasses.replace(new, evals=old.evals) == old  # sizes, arrivals, budgets kept
        if new.kind != "rlhf":
            assert new.evals == old.evals
            continue
        run = by_evals[tuple(ev.score for ev in new.evals)]
        assert truth.hacking == run.truth.hacking and truth.true_at_evals == run.truth.true_gold
        assert not any(isinstance(ev, ItemEval) for ev in new.evals)
