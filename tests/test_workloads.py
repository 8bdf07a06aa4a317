"""The synthetic workload: seeding, the job mix, curve shapes, offered load, validation, and
the structural split between what a platform sees (JobSpec, JobView) and the hidden truth."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import numpy as np
import pytest

from evalstop.schedulers import JobView
from evalstop.workloads import (
    KINDS,
    PRESETS,
    JobSpec,
    JobTruth,
    KindShape,
    Workload,
    WorkloadConfig,
    generate,
)
from evalstop.workloads.table import DenseEvals

PAPER = PRESETS["paper"]
N_LARGE = 5_000


@pytest.fixture(scope="module")
def large() -> Workload:
    return generate(PAPER.with_(n_jobs=N_LARGE), seed=11)


def kinds_of(workload: Workload) -> np.ndarray:
    return np.array([spec.kind for spec in workload.jobs])


def hacking_of(workload: Workload) -> np.ndarray:
    return np.array([truth.hacking for truth in workload.truth])


# -- seeding ---------------------------------------------------------------------------------


def test_same_seed_gives_the_identical_workload() -> None:
    config = PAPER.with_(n_jobs=200)
    first, second = generate(config, seed=5), generate(config, seed=5)
    assert first == second
    assert first.seed == 5
    assert first.config is config


def test_different_seeds_give_different_workloads() -> None:
    config = PAPER.with_(n_jobs=200)
    a, b = generate(config, seed=5), generate(config, seed=6)
    assert [s.arrival_s for s in a.jobs] != [s.arrival_s for s in b.jobs]
    assert [s.kind for s in a.jobs] != [s.kind for s in b.jobs]
    assert [t.duration_s for t in a.truth] != [t.duration_s for t in b.truth]
    assert [s.evals for s in a.jobs] != [s.evals for s in b.jobs]


def test_generation_does_not_touch_the_global_rng() -> None:
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    generate(PAPER.with_(n_jobs=50), seed=0)
    assert np.random.random() == expected


def test_eval_noise_changes_scores_but_not_the_truth() -> None:
    quiet = generate(PAPER.with_(n_jobs=300, eval_noise=0.0), seed=3)
    noisy = generate(PAPER.with_(n_jobs=300, eval_noise=0.05), seed=3)
    assert quiet.truth == noisy.truth
    for spec, truth in zip(quiet.jobs, quiet.truth, strict=True):
        assert [ev.score for ev in spec.evals] == list(truth.true_at_evals)
    assert [s.evals for s in quiet.jobs] != [s.evals for s in noisy.jobs]


def test_changing_one_kind_leaves_the_other_kinds_curves_alone() -> None:
    """_draw_curves draws the same number of values per job whatever its kind."""
    base = generate(PAPER.with_(n_jobs=300), seed=4)
    other = generate(PAPER.with_(n_jobs=300, lora_gain=(0.6, 0.9), dpo_rate=(8.0, 9.0)), seed=4)
    for spec, a, b in zip(base.jobs, base.truth, other.truth, strict=True):
        if spec.kind == "rlhf":
            assert a == b
        else:
            assert a.true_at_evals != b.true_at_evals
    assert [s.arrival_s for s in base.jobs] == [s.arrival_s for s in other.jobs]


# -- the job mix -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rlhf_share", "lora_share_of_rest", "hacking_share"), [(0.8, 0.5, 0.6), (0.5, 0.25, 0.3)]
)
def test_kind_and_hacking_shares_match_the_config(
    rlhf_share: float, lora_share_of_rest: float, hacking_share: float
) -> None:
    config = PAPER.with_(
        n_jobs=N_LARGE,
        rlhf_share=rlhf_share,
        lora_share_of_rest=lora_share_of_rest,
        hacking_share=hacking_share,
    )
    workload = generate(config, seed=2)
    kinds, hacking = kinds_of(workload), hacking_of(workload)
    rest = 1.0 - rlhf_share
    # tolerances are 4-5 binomial standard deviations at n = 5,000
    assert np.mean(kinds == "rlhf") == pytest.approx(rlhf_share, abs=0.035)
    assert np.mean(kinds == "lora") == pytest.approx(rest * lora_share_of_rest, abs=0.03)
    assert np.mean(kinds == "dpo") == pytest.approx(rest * (1 - lora_share_of_rest), abs=0.03)
    assert np.mean(hacking[kinds == "rlhf"]) == pytest.approx(hacking_share, abs=0.035)
    assert not hacking[kinds != "rlhf"].any()  # only RLHF jobs hack


def test_extreme_shares() -> None:
    none_hack = generate(PAPER.with_(n_jobs=300, hacking_share=0.0), seed=1)
    assert not hacking_of(none_hack).any()
    all_rlhf_hack = generate(PAPER.with_(n_jobs=300, rlhf_share=1.0, hacking_share=1.0), seed=1)
    assert set(kinds_of(all_rlhf_hack)) == {"rlhf"}
    assert hacking_of(all_rlhf_hack).all()


def test_sizes_ids_tenants_and_evals_are_well_formed(large: Workload) -> None:
    config = large.config
    assert [s.job_id for s in large.jobs] == list(range(N_LARGE))
    arrivals = [s.arrival_s for s in large.jobs]
    assert arrivals[0] > 0
    assert all(b > a for a, b in pairwise(arrivals))
    expected_progress = [(i + 1) / config.evals_per_job for i in range(config.evals_per_job)]
    for spec, truth in zip(large.jobs, large.truth, strict=True):
        assert spec.kind in KINDS
        assert spec.gpus in config.shapes[spec.kind].gpu_choices
        assert 0 <= spec.tenant < config.n_tenants
        assert spec.budget_s > 0
        assert truth.duration_s > 0
        assert [ev.step for ev in spec.evals] == list(range(1, config.evals_per_job + 1))
        assert [ev.progress for ev in spec.evals] == pytest.approx(expected_progress, rel=1e-12)
        assert spec.evals[-1].progress == 1.0
        assert len(truth.true_at_evals) == config.evals_per_job
    assert {s.tenant for s in large.jobs} == set(range(config.n_tenants))


def test_budget_error_sigma_zero_makes_budgets_exact() -> None:
    workload = generate(PAPER.with_(n_jobs=200, budget_error_sigma=0.0), seed=9)
    for spec, truth in zip(workload.jobs, workload.truth, strict=True):
        assert spec.budget_s == truth.duration_s


@pytest.mark.parametrize("offered_load", [0.4, 0.7, 1.3])
def test_offered_load_matches_the_config(offered_load: float) -> None:
    config = PAPER.with_(n_jobs=N_LARGE, offered_load=offered_load, total_gpus=32)
    workload = generate(config, seed=8)
    work_gpu_s = sum(s.gpus * t.duration_s for s, t in zip(workload.jobs, workload.truth, strict=True))
    span_s = workload.jobs[-1].arrival_s - workload.jobs[0].arrival_s
    assert work_gpu_s / (config.total_gpus * span_s) == pytest.approx(offered_load, rel=0.10)


# -- curves ----------------------------------------------------------------------------------


def test_hacking_true_curve_rises_to_its_peak_then_falls(large: Workload) -> None:
    config = large.config
    n_hacking = 0
    for spec, truth in zip(large.jobs, large.truth, strict=True):
        if not truth.hacking:
            continue
        n_hacking += 1
        assert config.peak_low <= truth.peak_progress <= config.peak_high
        q, p = truth.true_at_evals, [ev.progress for ev in spec.evals]
        for (p0, q0), (p1, q1) in pairwise(zip(p, q, strict=True)):
            if p1 <= truth.peak_progress:
                assert q1 > q0, (spec.job_id, p0, p1)
            elif p0 >= truth.peak_progress:
                assert q1 < q0, (spec.job_id, p0, p1)
        best = int(np.argmax(q))
        assert 0 < best < len(q) - 1  # rises, then falls
        assert p[best - 1] < truth.peak_progress < p[best + 1]
        assert truth.true_peak >= max(q)
        assert truth.true_final == q[-1] < truth.true_peak
    assert n_hacking > 1000


def test_non_hacking_true_curves_never_fall(large: Workload) -> None:
    for truth in large.truth:
        if truth.hacking:
            continue
        q = truth.true_at_evals
        assert all(b >= a - 1e-12 for a, b in pairwise(q))
        assert truth.peak_progress == 1.0
        assert truth.true_final == pytest.approx(truth.true_peak, rel=1e-9)


def test_training_loss_strictly_decreases_for_every_job(large: Workload) -> None:
    for spec in large.jobs:
        loss = [ev.loss for ev in spec.evals]
        assert all(isinstance(v, float) for v in loss)
        assert all(b < a for a, b in pairwise(loss)), spec.job_id  # hacking jobs included


def test_a_row_s_loss_is_the_same_floats_however_rows_are_asked_for() -> None:
    """The loss is computed from each job's time constant when asked for: one row, a slice and
    the whole table give the same floats, and they are the kind's curve at the eval's progress."""
    evals = generate(PAPER.with_(n_jobs=N_LARGE), 11).table.evals  # fresh: nothing cached yet
    assert isinstance(evals, DenseEvals)
    whole = evals.losses(0, N_LARGE)
    before = [[ev.loss for ev in row] for row in evals.rows(770, 790)]
    evals.row(0)  # from here on the whole loss matrix is kept
    assert [[ev.loss for ev in row] for row in evals.rows(770, 790)] == before == whole[770:790].tolist()
    for i in (0, 1, 777, N_LARGE - 1):
        assert [ev.loss for ev in evals.row(i)] == whole[i].tolist()
        assert [ev.loss for ev in evals.rows(i, i + 3)[0]] == whole[i].tolist()
        tau = float(evals.loss_tau[i])
        want = [0.2 + 0.8 * np.exp(-(p / tau) / 1.0) for p in evals.progress.tolist()]
        assert whole[i].tolist() == pytest.approx(want, rel=2**-24)  # exp rounded to 24 bits


def test_training_loss_is_blind_to_hacking(large: Workload) -> None:
    """The loss is drawn the same way for every kind: its level says nothing about the label."""
    hacking = hacking_of(large)
    rlhf = kinds_of(large) == "rlhf"
    final_loss = np.array([spec.evals[-1].loss for spec in large.jobs])
    assert np.mean(final_loss[rlhf & hacking]) == pytest.approx(
        np.mean(final_loss[rlhf & ~hacking]), rel=0.05
    )


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"n_jobs": 0}, "n_jobs"),
        ({"n_jobs": 10.0}, "n_jobs"),
        ({"total_gpus": 0}, "total_gpus"),
        ({"offered_load": 0.0}, "offered_load"),
        ({"offered_load": float("nan")}, "offered_load"),
        ({"rlhf_share": 1.5}, "rlhf_share"),
        ({"lora_share_of_rest": -0.1}, "lora_share_of_rest"),
        ({"hacking_share": 2}, "hacking_share"),
        ({"peak_low": 0.0}, "peak_low"),
        ({"peak_low": 0.7, "peak_high": 0.6}, "peak_high"),
        ({"peak_high": 1.2}, "peak_high"),
        ({"gao_gamma": 0.0}, "gao_gamma"),
        ({"evals_per_job": 0}, "evals_per_job"),
        ({"eval_noise": -0.01}, "eval_noise"),
        ({"n_tenants": 0}, "n_tenants"),
        ({"budget_error_sigma": -1.0}, "budget_error_sigma"),
    ],
)
def test_invalid_config_values_raise_naming_the_parameter(changes: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=rf"The '{name}' parameter of WorkloadConfig must be .* Got "):
        PAPER.with_(**changes)


def test_shapes_asking_for_more_gpus_than_the_cluster_raise_when_sizes_are_drawn() -> None:
    config = WorkloadConfig(total_gpus=4)  # a trace brings its own sizes: the config alone is fine
    with pytest.raises(
        ValueError,
        match=r"'shapes' parameter of WorkloadConfig asks for 8 GPUs per rlhf job.*"
        r"total_gpus=4",
    ):
        generate(config, seed=0)


def test_unknown_kind_in_shapes_raises() -> None:
    shapes = {**PAPER.shapes, "sft": KindShape((1,), (1.0,), 1.0, 0.5)}
    with pytest.raises(ValueError, match=r"'shapes' parameter .* Got 'sft' instead"):
        PAPER.with_(shapes=shapes)


def test_unknown_field_in_with_raises_naming_it() -> None:
    with pytest.raises(ValueError, match=r"Unknown WorkloadConfig parameter\(s\): \['n_gpus'\]"):
        PAPER.with_(n_gpus=8)


def _lora(shape: KindShape) -> dict[str, object]:
    return {"shapes": {**PAPER.shapes, "lora": shape}}


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"shapes": {"rlhf": KindShape((2,), (1.0,), 4.0, 0.6)}}, "shapes"),  # KeyError 'lora' later
        (_lora(KindShape((1, 2), (0.5, 0.6), 1.0, 0.6)), "shapes"),  # probs sum to 1.1
        (_lora(KindShape((1, 2), (0.5, 0.5), -1.0, 0.6)), "shapes"),  # negative durations
        (_lora(KindShape((0, 1), (0.5, 0.5), 1.0, 0.6)), "shapes"),  # jobs with 0 GPUs
        ({"loss_tau": (0.0, 0.0)}, "loss_tau"),  # loss no longer decreases
    ],
    ids=["missing-kind", "probs-sum", "negative-median", "zero-gpus", "zero-loss-tau"],
)
def test_invalid_nested_config_values_raise_at_construction(changes: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=rf"'{name}' parameter of WorkloadConfig"):
        PAPER.with_(n_jobs=50, total_gpus=16, **changes)


# -- structural hiding -----------------------------------------------------------------------

HIDDEN = ("hacking", "duration_s", "peak_progress", "true_at_evals", "true_peak", "true_final")


def test_jobspec_carries_no_label_or_true_duration(large: Workload) -> None:
    spec_fields = {f.name for f in dataclasses.fields(JobSpec)}
    assert spec_fields.isdisjoint(f.name for f in dataclasses.fields(JobTruth))
    spec = large.jobs[0]
    for name in HIDDEN:
        assert not hasattr(spec, name), name
    assert not hasattr(spec, "__dict__")  # slots: nothing can be bolted on
    with pytest.raises((AttributeError, TypeError)):
        object.__setattr__(spec, "hacking", True)


def test_jobview_carries_no_label_or_true_duration() -> None:
    view = JobView(0, 0, "rlhf", 2, 0.0, 100.0)
    for name in HIDDEN:
        assert not hasattr(view, name), name
    with pytest.raises(AttributeError):
        view.hacking = True  # type: ignore[attr-defined]
    assert set(JobView.__slots__).isdisjoint(HIDDEN)
