"""The noise-aware stopping rules: tables of (params, scores) -> first stop, plus the one
equivalence that matters to users: ``patience`` decides exactly as Hugging Face's
``EarlyStoppingCallback`` driven by the real Trainer objects."""

from __future__ import annotations

import math
import types
from collections.abc import Sequence

import numpy as np
import pytest

from evalstop.detectors import (
    Cusum,
    Detector,
    Eval,
    ItemEval,
    MannKendall,
    NoiseAware,
    Paired,
    Patience,
    parse_spec,
)
from evalstop.detectors._mann_kendall import _mk_push, _mk_z, mann_kendall_z
from evalstop.detectors._noise import SIGMA_WINDOW, curve_sigma, online_sigma, push_value, sigma_state

NAN = math.nan


def evals(scores: Sequence[float]) -> list[Eval]:
    return [Eval(step=i + 1, score=s, progress=(i + 1) / len(scores)) for i, s in enumerate(scores)]


def stop_index(detector: Detector, scores: Sequence[float]) -> int | None:
    return detector.evaluate(evals(scores)).stop_index


# ---- tables: (detector, scores, expected first stop index) --------------------------------------

PLATEAU = [0.5, 0.52, 0.51, 0.53, 0.52, 0.51, 0.53, 0.52, 0.51, 0.52, 0.53, 0.51]
PEAK_FALL = [0.1, 0.3, 0.5, 0.6, 0.58, 0.5, 0.45, 0.4, 0.35, 0.3]
LONG_PEAK_FALL = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2]

TABLE: list[tuple[Detector, list[float], int | None]] = [
    # patience: count evals that do not beat the best by more than min_delta
    (Patience(patience=2), [0.1, 0.2, 0.15, 0.19], 3),
    (Patience(patience=2), [0.1, 0.2, 0.15, 0.21, 0.2, 0.2], 5),
    (Patience(patience=2, min_delta=0.05), [0.1, 0.2, 0.22, 0.23], 3),  # small gains do not reset
    (Patience(patience=2, min_delta=0.05), [0.1, 0.2, 0.26, 0.32, 0.38], None),
    (Patience(patience=2, min_delta=0.05), [0.1, 0.2, 0.26, 0.3, 0.35], 4),  # +0.05 is not > 0.05
    (Patience(patience=1, mode="min"), [3.0, 2.0, 2.5], 2),
    (Patience(patience=2), [0.1, 0.2, NAN, 0.15, NAN, 0.25], None),  # NaN neither counts nor resets
    # cusum with a known sigma: g += drop/sigma - drift, reset at a new best
    (Cusum(sigma=0.1, threshold=2.0, drift=0.5, n_warmup_evals=1), [0.5, 0.6, 0.5, 0.45, 0.4], 4),
    (Cusum(sigma=0.1, threshold=2.0, drift=0.5, n_warmup_evals=1), [0.5, 0.6, 0.5, 0.7, 0.6, 0.65], None),
    (Cusum(sigma=0.1, threshold=2.0, drift=1.0, n_warmup_evals=1), [0.5, 0.6, 0.5, 0.45, 0.4], None),
    (Cusum(sigma=0.01, threshold=5.0), PLATEAU, None),  # drift 2 sigma absorbs plateau noise
    (Cusum(sigma=0.01), PEAK_FALL, 5),  # warm-up of 5 evals, then 0.1 / 0.01 - 2 = 8 > 5
    (Cusum(), PEAK_FALL, 6),  # second differences see only the bend at the peak as noise
    (Cusum(), LONG_PEAK_FALL, 7),
    # mann-kendall on the evals strictly after the best
    (MannKendall(min_window=4), [0.9, 0.8, 0.7, 0.6, 0.5], 4),
    (MannKendall(min_window=5), [0.9, 0.8, 0.7, 0.6, 0.5], None),
    (MannKendall(min_window=4), [0.9, 0.5, 0.6, 0.5, 0.6, 0.5, 0.6], None),  # no trend after the drop
    (MannKendall(), PLATEAU, None),
    (MannKendall(), PEAK_FALL, 8),  # five evals after the best, all falling
    # noise-aware: declines must exceed z * SE of the difference
    (NoiseAware(sigma=0.01, z=2.0, n_warmup_evals=1), [0.5, 0.6, 0.57, 0.57], 3),
    (NoiseAware(sigma=0.05, z=2.0, n_warmup_evals=1), [0.5, 0.6, 0.57, 0.57, 0.4, 0.4], 5),
    (NoiseAware(n_items=100, z=2.0, n_warmup_evals=1), [0.5, 0.6, 0.5, 0.5], None),  # SE 0.05: 0.1 < 2*0.07
    (NoiseAware(n_items=400, z=2.0, n_warmup_evals=1), [0.5, 0.6, 0.5, 0.5], 3),
    (NoiseAware(sigma=0.01, z=2.0, against="previous", n_warmup_evals=1), [0.5, 0.6, 0.55, 0.5, 0.52], 3),
    (NoiseAware(), PLATEAU, None),
    (NoiseAware(sigma=0.02), PEAK_FALL, 6),
    (NoiseAware(), LONG_PEAK_FALL, 8),  # 0.1 and 0.15 below the best > 3 * sqrt(2) * sigma
    (NoiseAware(sigma=0.01, z=2.0, n_warmup_evals=1), [0.5, 0.6, 0.5, NAN, 0.5], 4),
    # paired without items falls back to an unpaired test with the online sigma
    (Paired(), PLATEAU, None),
    (Paired(), LONG_PEAK_FALL, 8),
]


@pytest.mark.parametrize(("detector", "scores", "expected"), TABLE)
def test_first_stop(detector: Detector, scores: list[float], expected: int | None) -> None:
    verdict = detector.evaluate(evals(scores))
    assert verdict.stop_index == expected
    if expected is not None:
        assert verdict.reason


def test_noise_aware_rules_ignore_a_nan_spike() -> None:
    scores = [0.5, 0.51, 0.52, 0.5, 0.51, NAN, 0.52, NAN, NAN, 0.5]
    for spec in ("patience:patience=5", "cusum", "mann-kendall", "noise-aware", "paired"):
        assert not parse_spec(spec).evaluate(evals(scores)).stopped, spec


# ---- the noise estimate --------------------------------------------------------------------------


def test_curve_sigma_recovers_the_noise_under_a_trend() -> None:
    rng = np.random.default_rng(np.random.SeedSequence(7))
    trend = np.linspace(0.0, 1.0, 4000)
    estimate = curve_sigma(list(trend + rng.normal(0.0, 0.03, trend.size)))
    assert estimate == pytest.approx(0.03, rel=0.05)
    assert curve_sigma([0.3, 0.4]) is None
    assert curve_sigma([0.1, 0.2, 0.3, 0.4]) == pytest.approx(0.0, abs=1e-12)


def test_curve_sigma_ignores_a_rise_then_fall() -> None:
    """A noiseless peak-then-decline has a sharp change of slope only at the peak."""
    curve = [min(0.1 * i, 1.5 - 0.05 * i) for i in range(20)]
    assert curve_sigma(curve) < 0.01 < 0.02 < np.std(np.diff(curve))


def test_noise_aware_online_false_alarm_rate_is_small_on_flat_noise() -> None:
    rng = np.random.default_rng(np.random.SeedSequence(11))
    runs = rng.normal(0.5, 0.02, size=(400, 20))
    fired = [NoiseAware().evaluate(evals(list(r))).stopped for r in runs]
    lenient = [NoiseAware(z=2.0).evaluate(evals(list(r))).stopped for r in runs]
    naive = [parse_spec("evalstop:k=2,against=best").evaluate(evals(list(r))).stopped for r in runs]
    # the best is the maximum of noisy evals, so z = 2 against it is not enough; z = 3 is
    assert np.mean(fired) < 0.1 < 0.2 < np.mean(lenient) < 0.9 < np.mean(naive)


def test_mann_kendall_z_matches_the_closed_form() -> None:
    # S = -10, Var(S) = 5*4*15/18 for five strictly decreasing values
    assert mann_kendall_z([5, 4, 3, 2, 1]) == pytest.approx(-9 / math.sqrt(50 / 3))
    # ties: one pair tied removes 1*2*9/18 = 1 from Var(S); S = -5 + 0 ... computed by hand
    assert mann_kendall_z([3, 3, 2, 1]) == pytest.approx(-4 / math.sqrt((4 * 3 * 13 - 2 * 1 * 9) / 18))
    assert mann_kendall_z([1, 1, 1]) == 0.0


def test_mann_kendall_window_statistic_matches_the_batch_formula_as_values_enter_and_leave() -> None:
    rng = np.random.default_rng(np.random.SeedSequence(13))
    values = [float(v) for v in rng.integers(0, 6, size=60)]  # many ties
    state = {"window": [], "window_sorted": [], "mk_s": 0, "mk_ties": 0}
    for i, v in enumerate(values):
        _mk_push(state, v, max_window=9)
        window = values[max(0, i - 8) : i + 1]
        assert state["window"] == window
        assert _mk_z(state["mk_s"], len(window), state["mk_ties"]) == mann_kendall_z(window)


def test_mann_kendall_looks_at_the_last_max_window_evals_after_the_best() -> None:
    # after the best, a long climb that stays below it, then a decline: the window forgets the climb
    scores = [1.0] + [0.1 + 0.01 * i for i in range(40)] + [0.49 - 0.01 * i for i in range(1, 8)]
    assert stop_index(MannKendall(max_window=8), scores) == 45
    assert stop_index(MannKendall(max_window=64), scores) is None


def test_online_sigma_equals_curve_sigma_within_the_window_and_forgets_beyond_it() -> None:
    rng = np.random.default_rng(np.random.SeedSequence(17))
    values = [float(v) for v in np.linspace(0, 1, 200) + rng.normal(0.0, 0.02, 200)]
    state = sigma_state()
    for i, v in enumerate(values):
        push_value(state, v)
        first = max(0, i + 1 - (SIGMA_WINDOW + 2))
        expected = curve_sigma(values[first : i + 1])
        assert online_sigma(state) == (None if expected is None else pytest.approx(expected, rel=1e-12))
        assert len(state["sigma_diffs"]) <= SIGMA_WINDOW


def test_cusum_floor_ignores_a_dip_at_a_ceiling() -> None:
    """A metric that sits exactly at a ceiling has an online sigma of 0: without the floor a
    1e-5 dip is millions of sigmas."""
    scores = [0.8] * 8 + [0.79999]
    assert stop_index(Cusum(), scores) is None
    assert stop_index(Cusum(min_delta=0.0), scores) == 8
    assert stop_index(Cusum(), [0.8] * 8 + [0.79, 0.78]) == 8  # a real drop still counts


# ---- paired tests on per-item scores --------------------------------------------------------------


def item_evals(matrix: np.ndarray) -> list[Eval]:
    return [
        ItemEval(step=i + 1, score=float(row.mean()), items=tuple(map(float, row)))
        for i, row in enumerate(matrix)
    ]


def prompts_with_difficulty(rng: np.random.Generator, shift: Sequence[float]) -> np.ndarray:
    """Per-prompt scores: a large prompt effect shared by all evals, a small per-eval effect."""
    difficulty = rng.normal(0.0, 0.5, 200)
    return np.array([difficulty + s + rng.normal(0.0, 0.05, 200) for s in shift])


def test_paired_sees_a_small_drop_that_the_unpaired_standard_error_hides() -> None:
    rng = np.random.default_rng(np.random.SeedSequence(3))
    history = item_evals(prompts_with_difficulty(rng, [0.0, 0.05, 0.1, 0.08, 0.06, 0.04]))
    assert Paired(k=2, n_warmup_evals=0).evaluate(history).stop_index == 4
    assert not NoiseAware(k=2, n_warmup_evals=0, items=True).evaluate(history).stopped


def test_paired_does_not_fire_on_a_plateau_of_prompts() -> None:
    rng = np.random.default_rng(np.random.SeedSequence(5))
    history = item_evals(prompts_with_difficulty(rng, [0.0, 0.1] + [0.1] * 12))
    assert not Paired(k=2, alpha=0.01, n_warmup_evals=0).evaluate(history).stopped


def test_paired_falls_back_when_the_prompt_sets_differ() -> None:
    a = ItemEval(1, 0.6, items=(0.5, 0.7))
    b = ItemEval(2, 0.3, items=(0.2, 0.3, 0.4))
    verdict = Paired(k=1, n_warmup_evals=0).worse(a.score, a.items, b, 0.0)
    assert verdict == (True, "unpaired, online sigma")


# ---- parameter errors name the parameter and the value -------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("patience:patience=0", "'patience' parameter of Patience must be an int >= 1 and <= 1000000. Got 0"),
        ("patience:min_delta=-1", "'min_delta' parameter of Patience must be a finite number >= 0.0 and <="),
        ("cusum:threshold=0", "threshold' parameter of Cusum must be a finite number > 0.0 and <= 1000000.0"),
        ("cusum:sigma=nan", "'sigma' parameter of Cusum must be a finite number >= 0.0 and <= 1e+100."),
        (
            "mann-kendall:alpha=0.7",
            "'alpha' parameter of MannKendall must be a finite number >= 1e-12 and < 0.5. Got 0.7",
        ),
        ("mann-kendall:min_window=2", "'min_window' parameter of MannKendall must be an int >= 3 and <="),
        ("noise-aware:against=last", "'against' parameter of NoiseAware must be one of 'best', 'previous'"),
        (
            "noise-aware:sigma=0.1,n_items=50",
            "at most one of 'sigma' and 'n_items'. Got sigma=0.1 and n_items=50",
        ),
        ("paired:k=0", "The 'k' parameter of Paired must be an int >= 1 and <= 1000000. Got 0 instead."),
        ("paired:mode=up", "'mode' parameter of Paired must be one of 'max', 'min'. Got 'up' instead."),
    ],
)
def test_bad_parameters_are_named(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=_escape(message)):
        parse_spec(spec)


def _escape(text: str) -> str:
    import re

    return re.escape(text)


# ---- patience == Hugging Face EarlyStoppingCallback -------------------------------------------------


def hf_stop_index(scores: Sequence[float], patience: int, threshold: float, greater: bool) -> int | None:
    """Drive the real callback the way ``Trainer`` does: ``on_evaluate`` first, then the
    Trainer's own ``_determine_best_metric`` updates ``state.best_metric``."""
    tf = pytest.importorskip("transformers", reason="transformers is not installed (evalstop[hf])")
    args = tf.TrainingArguments(
        output_dir="unused",
        eval_strategy="steps",
        save_strategy="steps",
        load_best_model_at_end=True,
        metric_for_best_model="score",
        greater_is_better=greater,
        report_to=[],
    )
    state, control = tf.TrainerState(), tf.TrainerControl()
    callback = tf.EarlyStoppingCallback(early_stopping_patience=patience, early_stopping_threshold=threshold)
    callback.on_train_begin(args, state, control)
    trainer = types.SimpleNamespace(args=args, state=state)
    for i, score in enumerate(scores):
        state.global_step = i + 1
        metrics = {"eval_score": score}
        callback.on_evaluate(args, state, control, metrics=metrics)
        tf.Trainer._determine_best_metric(trainer, metrics=metrics, trial=None)
        if control.should_training_stop:
            return i
    return None


def test_patience_matches_hugging_face_early_stopping() -> None:
    rng = np.random.default_rng(np.random.SeedSequence(2024))
    checked = stops = 0
    for _ in range(300):
        n = int(rng.integers(2, 25))
        patience = int(rng.integers(1, 5))
        threshold = float(rng.choice([0.0, 0.01, 0.05]))
        greater = bool(rng.integers(0, 2))
        # rounded values make ties (which neither resets nor improves) common
        scores = list(np.round(np.cumsum(rng.normal(0.01, 0.04, n)), 2))
        expected = hf_stop_index(scores, patience, threshold, greater)
        rule = Patience(patience=patience, min_delta=threshold, mode="max" if greater else "min")
        assert rule.evaluate(evals(scores)).stop_index == expected, (scores, patience, threshold, greater)
        checked += 1
        stops += expected is not None
    assert checked == 300 and 50 < stops < 280  # the comparison covered both outcomes


def test_item_rules_pass_the_contract_on_per_item_histories() -> None:
    from evalstop.testing import check_detector

    rng = np.random.default_rng(np.random.SeedSequence(8))
    shapes = ([0.0, 0.1, 0.2, 0.15, 0.05, 0.0], [0.0, 0.1, 0.1, 0.1, 0.1], [0.3, 0.2, 0.1, 0.0])
    histories = [item_evals(prompts_with_difficulty(rng, shape)) for shape in shapes]
    histories.append([*histories[0][:3], ItemEval(4, NAN, items=(NAN, 0.1)), *histories[0][4:]])
    for detector in (Paired(k=1, n_warmup_evals=0), Paired(), NoiseAware(items=True, n_warmup_evals=1)):
        check_detector(detector, histories)
    assert Paired(k=1, n_warmup_evals=0).evaluate(histories[2]).stopped  # the contract run is not vacuous
