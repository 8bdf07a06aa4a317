"""Paired comparison of two policies across seeds (common random numbers). See docs/metrics.md.

Seed ``i`` of the baseline and seed ``i`` of the treatment see the same workload, so the unit of
analysis is the per-seed difference ``d_i = treatment_i - baseline_i``.

Headline relative change: the ratio of means, ``(mean(t) - mean(b)) / mean(b)``. The mean of
per-seed relative changes is reported beside it; it weights a seed with a small baseline more and
is undefined if any baseline value is 0.

Undefined quantities are ``nan``, never a made-up 0 or 1:
- relative changes when the baseline mean (or, per seed, a baseline value) is 0;
- both p-values, the CI and Cohen's d_z when there are fewer than 2 seeds;
- both p-values when every difference is 0 (no evidence either way);
- the t-test p-value and d_z when the differences have zero spread (t is not finite);
- the bootstrap CI when some resample has a baseline mean of 0.

Bootstrap: percentile method, 95 %, resampling seed indices (both arms with the same indices)
with a ``numpy.random.Generator`` built from ``SeedSequence(seed)``; no global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .._validation import InvalidParameterError, check_int

__all__ = ["Comparison", "mean_ci", "paired_compare", "rate_cell", "wilson"]

_NAN = float("nan")
_CI_LEVEL = 0.95
_MAX_CELLS_PER_CHUNK = 2_000_000  # bounds bootstrap memory: rows * n per chunk

FloatArray = np.ndarray[Any, np.dtype[np.float64]]


@dataclass(frozen=True)
class Comparison:
    """Treatment versus baseline over ``n`` paired seeds."""

    n: int
    baseline_mean: float
    treatment_mean: float
    rel_change: float  # headline: (mean(t) - mean(b)) / mean(b)
    rel_change_per_seed_mean: float  # mean over seeds of (t_i - b_i) / b_i
    rel_change_ci_lo: float  # bootstrap 95 % CI of rel_change
    rel_change_ci_hi: float
    p_ttest: float  # paired t-test, two-sided (scipy.stats.ttest_rel)
    p_wilcoxon: float  # Wilcoxon signed-rank, two-sided, zero differences dropped
    cohens_dz: float  # mean(d) / sd(d, ddof=1)
    n_boot: int
    seed: int

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for ``json.dumps``; ``nan`` becomes ``None`` so the output is strict JSON."""
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(self).items()}


def paired_compare(
    baseline: Sequence[float],
    treatment: Sequence[float],
    *,
    n_boot: int = 10_000,
    seed: int = 0,
) -> Comparison:
    """Compare ``treatment`` with ``baseline``, where index ``i`` of each is the same seed."""
    _check_boot("paired_compare", n_boot, seed)
    b = _as_finite("paired_compare", "baseline", baseline)
    t = _as_finite("paired_compare", "treatment", treatment)
    if b.size != t.size:
        raise InvalidParameterError(
            f"The 'treatment' parameter of paired_compare must have the same length as 'baseline' "
            f"({b.size}). Got length {t.size} instead."
        )
    lo, hi = _paired_ci(b, t, n_boot, seed)
    p_t, p_w = _p_values(b, t)
    return Comparison(
        n=int(b.size),
        baseline_mean=float(b.mean()),
        treatment_mean=float(t.mean()),
        rel_change=_rel(float(t.mean()), float(b.mean())),
        rel_change_per_seed_mean=_rel_per_seed_mean(b, t),
        rel_change_ci_lo=lo,
        rel_change_ci_hi=hi,
        p_ttest=p_t,
        p_wilcoxon=p_w,
        cohens_dz=_cohens_dz(t - b),
        n_boot=n_boot,
        seed=seed,
    )


def mean_ci(values: Sequence[float], n_boot: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean and its 95 % percentile-bootstrap CI (nan CI if n < 2)."""
    _check_boot("mean_ci", n_boot, seed)
    x = _as_finite("mean_ci", "values", values)
    mean = float(x.mean())
    if x.size < 2:
        return mean, _NAN, _NAN
    boot = _bootstrap_means(x[:, None], n_boot, seed)[:, 0]
    lo, hi = _percentile_interval(boot)
    return mean, lo, hi


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials (95 % by default): the
    interval a rate is printed with. Unlike the normal approximation it stays inside [0, 1] and
    is not empty at 0 or n (0 of 16 gives [0, .194]). (nan, nan) when ``n`` is 0."""
    if n < 0 or not 0 <= k <= n:
        raise InvalidParameterError(f"wilson needs 0 <= k <= n. Got k={k!r}, n={n!r} instead.")
    if n == 0:
        return _NAN, _NAN
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_cell(k: int, n: int) -> str:
    """A rate as the study tables print it: ``0.750 3/4 [.301, .954]`` (the rate, its counts and
    its 95 % Wilson interval); ``— 0/0`` when there are no trials."""
    if n == 0:
        return "— 0/0"
    lo, hi = wilson(k, n)
    return f"{k / n:.3f} {k}/{n} [{lo:.3f}, {hi:.3f}]"


def _check_boot(owner: str, n_boot: int, seed: int) -> None:
    check_int(owner, "n_boot", n_boot, min_value=1)
    check_int(owner, "seed", seed, min_value=0)


def _as_finite(owner: str, name: str, values: Sequence[float]) -> FloatArray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a non-empty 1-D sequence. Got {values!r} instead."
        )
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        i = int(bad[0])
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must contain only finite numbers. "
            f"Got {float(x[i])!r} at index {i} instead."
        )
    return x


def _rel(new: float, old: float) -> float:
    return (new - old) / old if old != 0 else _NAN


def _rel_per_seed_mean(b: FloatArray, t: FloatArray) -> float:
    if np.any(b == 0):
        return _NAN
    return float(np.mean((t - b) / b))


def _p_values(b: FloatArray, t: FloatArray) -> tuple[float, float]:
    """Two-sided p-values of the paired t-test and the Wilcoxon signed-rank test."""
    from scipy import stats  # here, not at module level: it costs ~0.6 s at every CLI start

    d = t - b
    if d.size < 2 or not np.any(d != 0):
        return _NAN, _NAN
    p_w = float(stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)
    if np.ptp(d) == 0:
        return _NAN, p_w
    p_t = float(stats.ttest_rel(t, b, alternative="two-sided").pvalue)
    return p_t, p_w


def _cohens_dz(d: FloatArray) -> float:
    if d.size < 2:
        return _NAN
    sd = float(np.std(d, ddof=1))
    return float(d.mean()) / sd if sd > 0 else _NAN


def _paired_ci(b: FloatArray, t: FloatArray, n_boot: int, seed: int) -> tuple[float, float]:
    if b.size < 2:
        return _NAN, _NAN
    boot = _bootstrap_means(np.column_stack([b, t]), n_boot, seed)
    if np.any(boot[:, 0] == 0):
        return _NAN, _NAN
    return _percentile_interval((boot[:, 1] - boot[:, 0]) / boot[:, 0])


def _bootstrap_means(data: FloatArray, n_boot: int, seed: int) -> FloatArray:
    """Column means of ``n_boot`` row-resamples of ``data`` (shape n x m) -> shape n_boot x m."""
    n = data.shape[0]
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    chunk = max(1, _MAX_CELLS_PER_CHUNK // n)
    out = np.empty((n_boot, data.shape[1]))
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = data[idx].mean(axis=1)
    return out


def _percentile_interval(samples: FloatArray) -> tuple[float, float]:
    tail = 100.0 * (1.0 - _CI_LEVEL) / 2.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail], method="linear")
    return float(lo), float(hi)
