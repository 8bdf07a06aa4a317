import json
import math

import numpy as np
import pytest

from evalstop._validation import InvalidParameterError
from evalstop.experiments.stats import mean_ci, paired_compare


def test_identical_arrays_give_zero_change_and_undefined_tests() -> None:
    x = [10.0, 12.0, 9.0, 11.0, 13.0]
    c = paired_compare(x, x, n_boot=500)
    assert c.rel_change == 0.0
    assert c.rel_change_per_seed_mean == 0.0
    assert (c.rel_change_ci_lo, c.rel_change_ci_hi) == (0.0, 0.0)
    assert math.isnan(c.p_ttest)
    assert math.isnan(c.p_wilcoxon)
    assert math.isnan(c.cohens_dz)


def test_clear_shift_is_significant_and_ci_excludes_zero() -> None:
    rng = np.random.default_rng(np.random.SeedSequence(1))
    base = rng.uniform(90.0, 110.0, size=20)
    treat = base * 0.9 + rng.normal(0.0, 0.5, size=20)
    c = paired_compare(base.tolist(), treat.tolist(), n_boot=2000, seed=3)
    assert c.n == 20
    assert c.p_ttest < 0.01
    assert c.p_wilcoxon < 0.01
    assert c.rel_change_ci_hi < 0.0
    assert c.rel_change_ci_lo < c.rel_change < c.rel_change_ci_hi
    assert c.rel_change == pytest.approx(-0.1, abs=0.01)
    assert c.cohens_dz < -3.0


def test_ratio_of_means_differs_from_mean_of_ratios() -> None:
    c = paired_compare([1.0, 100.0], [2.0, 100.0], n_boot=10)
    assert c.rel_change == pytest.approx(1.0 / 101.0)
    assert c.rel_change_per_seed_mean == pytest.approx(0.5)
    assert c.baseline_mean == 50.5
    assert c.treatment_mean == 51.0


def test_hand_computed_t_test_and_effect_size() -> None:
    base = [10.0, 10.0, 10.0, 10.0]
    treat = [11.0, 12.0, 13.0, 14.0]  # d = 1, 2, 3, 4: mean 2.5, sd sqrt(5/3)
    c = paired_compare(base, treat, n_boot=10)
    sd = math.sqrt(5.0 / 3.0)
    assert c.cohens_dz == pytest.approx(2.5 / sd)
    # t = 2.5 / (sd / 2) with 3 df; two-sided p from the t distribution
    from scipy import stats

    assert c.p_ttest == pytest.approx(2 * stats.t.sf(2.5 / (sd / 2), df=3))
    assert c.p_wilcoxon == pytest.approx(0.125)  # exact: 2 / 2**4


def test_constant_nonzero_difference_has_wilcoxon_but_no_t() -> None:
    c = paired_compare([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 3.0, 4.0, 5.0, 6.0], n_boot=10)
    assert math.isnan(c.p_ttest)
    assert math.isnan(c.cohens_dz)
    assert c.p_wilcoxon == pytest.approx(0.0625)


def test_single_seed_is_undefined_not_an_error() -> None:
    c = paired_compare([4.0], [2.0])
    assert c.rel_change == -0.5
    for name in ("p_ttest", "p_wilcoxon", "cohens_dz", "rel_change_ci_lo", "rel_change_ci_hi"):
        assert math.isnan(getattr(c, name)), name


def test_zero_baseline_makes_relative_change_undefined() -> None:
    c = paired_compare([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], n_boot=10)
    assert math.isnan(c.rel_change)
    assert math.isnan(c.rel_change_per_seed_mean)
    assert math.isnan(c.rel_change_ci_lo)
    assert json.loads(json.dumps(c.as_dict(), allow_nan=False))["rel_change"] is None


def test_bootstrap_is_deterministic_per_seed() -> None:
    base = [5.0, 7.0, 6.0, 9.0, 8.0, 4.0]
    treat = [4.0, 6.5, 6.2, 7.0, 7.5, 3.0]
    a = paired_compare(base, treat, n_boot=1000, seed=11)
    b = paired_compare(base, treat, n_boot=1000, seed=11)
    c = paired_compare(base, treat, n_boot=1000, seed=12)
    assert a == b
    assert (a.rel_change_ci_lo, a.rel_change_ci_hi) != (c.rel_change_ci_lo, c.rel_change_ci_hi)
    assert mean_ci(base, 1000, 5) == mean_ci(base, 1000, 5)


def test_bootstrap_does_not_touch_global_rng() -> None:
    np.random.seed(0)
    expected = np.random.random()
    np.random.seed(0)
    paired_compare([1.0, 2.0, 3.0], [2.0, 2.0, 5.0], n_boot=100)
    mean_ci([1.0, 2.0, 3.0], 100, 0)
    assert np.random.random() == expected


def test_mean_ci() -> None:
    mean, lo, hi = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0], n_boot=2000, seed=0)
    assert mean == 3.0
    assert 1.0 <= lo < mean < hi <= 5.0
    assert mean_ci([2.0, 2.0, 2.0], 100, 0) == (2.0, 2.0, 2.0)
    m, lo1, hi1 = mean_ci([3.5], 100, 0)
    assert m == 3.5 and math.isnan(lo1) and math.isnan(hi1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"baseline": [1.0, 2.0], "treatment": [1.0]}, "'treatment' parameter of paired_compare.*length 1"),
        ({"baseline": [], "treatment": []}, "'baseline' parameter of paired_compare must be a non-empty"),
        ({"baseline": [1.0, float("nan")], "treatment": [1.0, 2.0]}, "finite numbers. Got nan at index 1"),
        ({"baseline": [1.0], "treatment": [1.0], "n_boot": 0}, "'n_boot' parameter .* int >= 1. Got 0"),
        ({"baseline": [1.0], "treatment": [1.0], "seed": -1}, "'seed' parameter .* int >= 0. Got -1"),
    ],
)
def test_bad_inputs_name_the_parameter_and_value(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        paired_compare(**kwargs)  # type: ignore[arg-type]
