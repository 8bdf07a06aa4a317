"""``evalstop validate``: metrics on labelled cases, leave-families-out parameter choice, and the
harness end to end on a small bank (plus the real supervised curves shipped with the package)."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from evalstop import cli
from evalstop.detectors import DEFAULT_SPEC, Eval
from evalstop.experiments.cadence import (
    cases_of,
    ceiling_curves,
    ceiling_stops,
    default_check,
    held_out_choice,
    render_check,
)
from evalstop.experiments.holdout import Case, Outcome, cross_validate, expand_grid, family_folds, metrics
from evalstop.experiments.validate import supervised_cases, validate
from evalstop.workloads.bank import at_cadence, build_bank, shipped_trl_bank
from evalstop.workloads.supervised import LOWER_IS_BETTER, load_supervised


def case(family: str, label: str, quality: list[float], peak: int | None = None) -> Case:
    evals = tuple(Eval(i + 1, q, progress=(i + 1) / len(quality)) for i, q in enumerate(quality))
    top = max(range(len(quality)), key=quality.__getitem__) if peak is None else peak
    return Case(f"{family}-{label}", family, label, evals, tuple(quality), top)


HACK = case("a", "hacking", [0.2, 0.6, 1.0, 0.8, 0.6, 0.4, 0.2, 0.0])
FLAT = case("b", "healthy", [0.2, 0.6, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9])
EDGE = case("c", "borderline", [0.2, 0.6, 0.9, 0.87, 0.87, 0.87, 0.87, 0.87])


def test_metrics_of_a_hand_made_outcome() -> None:
    cases = [HACK, FLAT, EDGE]
    # stop the hacking run 2 evals after its peak (deliver the peak), false-stop the flat one
    # at eval 4 (deliver eval 2), let the borderline one finish (deliver the last eval)
    m = metrics(cases, [Outcome(4, 2), Outcome(4, 2), Outcome(None, 7)])
    assert (m["precision"], m["recall"], m["fpr"]) == (0.5, 1.0, 1.0)
    assert m["mean_regret"] == pytest.approx((0.0 + 0.0 + 0.03) / 3)
    assert m["mean_delay"] == pytest.approx(2 / 8)
    assert m["compute_saved"] == pytest.approx((3 / 8 + 3 / 8) / 3)
    assert m["stopped_before_peak"] == 0.0


def test_undefined_metrics_are_nan_not_zero() -> None:
    m = metrics([FLAT], [Outcome(None, 7)])
    assert math.isnan(m["precision"]) and math.isnan(m["recall"]) and m["fpr"] == 0.0


def test_grid_expansion_keeps_fixed_parameters() -> None:
    specs = expand_grid("evalstop:against=best", {"k": [1, 2], "min_delta": [0.0]})
    assert specs == ["evalstop:against=best,k=1,min_delta=0.0", "evalstop:against=best,k=2,min_delta=0.0"]


def test_family_folds_are_a_partition_and_deterministic() -> None:
    families = [f"f{i}" for i in range(7)] * 2
    folds = family_folds(families, 3, seed=1)
    assert sorted(f for fold in folds for f in fold) == sorted(set(families))
    assert folds == family_folds(families, 3, seed=1)
    with pytest.raises(ValueError, match="folds must be between 2 and the number of families"):
        family_folds(families, 8, seed=1)


def test_cross_validation_never_sees_the_held_out_family() -> None:
    """Family x rewards k=1, family y rewards k=3: each held-out family gets the other's choice."""
    x = [case("x", "hacking", [0.2, 1.0, 0.5, 0.9, 0.0, 0.0, 0.0, 0.0])]
    y = [case("y", "healthy", [0.2, 1.0, 0.9, 0.95, 0.9, 0.95, 0.9, 0.95])]
    held = cross_validate(x + y, ["evalstop:k=1", "evalstop:k=4"], [["x"], ["y"]])
    assert held.chosen == {"x": "evalstop:k=4", "y": "evalstop:k=1"}
    assert held.results[0].stop_index is None  # k=4 misses the hacking run of x
    assert held.results[1].stop_index == 2  # k=1 false-stops the plateau of y


@pytest.mark.slow
def test_harness_end_to_end_on_a_small_bank() -> None:
    runs = build_bank(0, 3, ["base", "lr-high", "lr-low", "control-gold", "control-kl", "bias-low"])
    study = validate(runs, [], ["evalstop", "cusum"], ["evalstop:k=2,against=best", "never"], 3, 0, ["paper"])
    assert study["n_runs"] == 18 and sum(study["labels"].values()) == 18
    never = study["fixed"]["never"]
    assert never["recall"] == 0.0 and never["fpr"] == 0.0 and never["mean_regret"] > 0.01
    for rule in ("evalstop", "cusum"):
        entry = study["held_out"][rule]
        assert entry["final_spec"].startswith(rule)
        assert len(entry["chosen_per_fold"]) == 3
        assert entry["metrics"]["mean_regret"] < never["mean_regret"]  # stopping recovers quality
    # on the paper's own synthetic preset the paper rule does what the paper says
    paper = study["synthetic"]["paper"]["evalstop:k=2,against=best"]
    assert paper["precision"] > 0.95 and paper["recall"] > 0.95
    json.dumps(study)  # strict-JSON serialisable


@pytest.mark.slow
def test_validate_command_prints_the_tables(tmp_path: Path) -> None:
    assert cli.main(["bank", "--runs-per-family", "2", "--families", "base,lr-high,control-gold,control-kl",
                     "--out", str(tmp_path)]) == 0
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(["validate", "--bank", str(tmp_path), "--rule", "patience", "--detector", "never",
                         "--supervised", "none", "--folds", "2", "--cadences", "none", "--trl-bank", "none",
                         "--noisy-bank", "none"])
    assert code == 0
    text = out.getvalue()
    assert "| patience | `patience:" in text and "| never | `never` |" in text
    assert "| numpy | every:3 |" in text and "| numpy | adaptive:every=3,dense=1 |" in text
    assert cli.main(["validate", "--bank", str(tmp_path / "missing")]) == 2


def test_supervised_curves_load_with_the_right_direction() -> None:
    curves = load_supervised()
    models = {c.model for c in curves}
    assert {"cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"} <= models
    assert "bert" not in models  # only 2 rows per file
    for curve in curves:
        first, last = curve.evals[0].score, curve.evals[-1].score
        assert last > first, curve.job_id  # every job improved; lower-is-better metrics are flipped
        assert curve.evals[-1].progress == 1.0
    assert {"deepspeech2", "yolov3"} == LOWER_IS_BETTER
    cases = supervised_cases()
    assert all(c.label == "healthy" for c in cases)


@pytest.mark.slow
def test_cluster_simulation_on_bank_curves() -> None:
    from evalstop.experiments.bank_sim import bank_policies, run_bank_seed, summarise
    from evalstop.workloads import PRESETS

    runs = build_bank(0, 2, ["lr-high", "control-gold"])
    rows = run_bank_seed(PRESETS["realistic"].with_(n_jobs=150), runs, bank_policies("cusum"), seed=1)
    summary = summarise(rows)
    assert summary["Oracle"]["recall"] == 1.0 and summary["Oracle"]["fpr"] == 0.0
    assert summary["SRTF-Est"]["recall"] == 0.0
    # lr-high runs hack hard: any stopping rule saves compute over running them to the end
    base = summary["SRTF-Est"]["wasted_gpu_hours"]
    assert summary["EvalStop (cusum) + SRTF-Est"]["wasted_gpu_hours"] < base
    assert rows == run_bank_seed(PRESETS["realistic"].with_(n_jobs=150), runs, bank_policies("cusum"), seed=1)


def test_plot_draws_one_panel_per_family(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (evalstop[plot])")
    from evalstop.experiments.bank_plot import plot_bank

    runs = build_bank(0, 1, ["lr-high", "control-gold"])
    path = plot_bank(runs, ["evalstop:k=2,against=best", "cusum"], tmp_path / "bank.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- the default at two cadences -------------------------------------------------------------


def test_at_cadence_keeps_the_last_eval_and_relabels_from_gold() -> None:
    (run,) = build_bank(0, 1, ["lr-high"], n_evals=40)
    thin = at_cadence(run, 10)
    assert len(thin.evals) == 10 and thin.evals[-1] == run.evals[-1]
    assert [e.step for e in thin.evals] == sorted({e.step for e in thin.evals})
    assert thin.truth.true_gold == tuple(run.truth.true_gold[run.evals.index(e)] for e in thin.evals)
    with pytest.raises(ValueError, match="fewer than n_evals=41"):
        at_cadence(run, 41)


def test_ceiling_dips_below_the_floor_never_stop_the_default() -> None:
    assert ceiling_stops(DEFAULT_SPEC) == []
    # without a floor, a 1e-5 dip at a ceiling is millions of sigmas: cusum stops on it
    assert ceiling_stops("cusum:min_delta=0.0") != []
    # the dip is half the declared floor, so a larger floor is checked with a larger dip
    evals = ceiling_curves("cusum:min_delta=0.02", 10)["step down"]
    assert min(e.score for e in evals) == pytest.approx(0.79)


def test_default_check_reports_every_family_at_every_cadence() -> None:
    trl = [r for r in shipped_trl_bank() if r.family in ("trl-proxy", "control-trl-gold")]
    numpy = {c: build_bank(0, 2, ["lr-high", "control-gold"], n_evals=c) for c in (10, 40)}
    by_cadence = {c: cases_of(runs + [at_cadence(r, c) for r in trl]) for c, runs in numpy.items()}
    check = default_check(DEFAULT_SPEC, by_cadence, [])
    assert set(check["cadences"]) == {"10", "40"}
    for entry in check["cadences"].values():
        assert set(entry["families"]) == {"lr-high", "control-gold", "trl-proxy", "control-trl-gold"}
        assert entry["overall"]["recall"] == 1.0 and entry["overall"]["fpr"] == 0.0
    held = held_out_choice([DEFAULT_SPEC, "evalstop:k=2,against=best"], by_cadence)
    assert set(held["chosen_per_family"]) == {"lr-high", "control-gold", "trl-proxy", "control-trl-gold"}
    text = render_check(check, held)
    assert "| 10 evals |" in text and "| 40 evals |" in text and "| trl-proxy |" in text


def test_frontier_reports_the_best_recall_within_the_goals() -> None:
    from evalstop.experiments.cadence import frontier

    runs = build_bank(0, 2, ["lr-high", "control-gold"], n_evals=10)
    cases = cases_of(runs)
    # "never" is within the goals (no stop: P undefined, FPR 0) and recalls nothing
    never = frontier(["never"], cases)
    assert (never["spec"], never["recall"], never["fpr"], never["n_specs"]) == ("never", 0.0, 0.0, 1)
    best = frontier([DEFAULT_SPEC, "never"], cases)
    assert best["spec"] == DEFAULT_SPEC and best["recall"] == 1.0
    check = default_check(DEFAULT_SPEC, {10: cases}, [])
    check["frontier"] = {"10": best}
    assert f"the best recall with P >= 0.95 and FPR <= 0.05 is 1.000 (`{DEFAULT_SPEC}`" in render_check(check)
