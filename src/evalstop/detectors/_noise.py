"""Noise estimates shared by the noise-aware rules, and an eval that carries per-item scores.

An eval score is usually a mean over a finite set of prompts, so it is noisy. The rules here
measure a decline in units of that noise. The noise comes, in order of preference, from the
eval's own per-item scores (:class:`ItemEval`), from a value the job reports (the eval noise
``sigma`` or the eval sample size), or from the curve itself (:func:`curve_sigma`): the spread
of its second differences ``x[t] - 2 x[t-1] + x[t-2]``, which have sd ``sigma * sqrt(6)`` under
independent noise and cancel any locally straight trend. First differences would also carry the
change of slope of a rise-then-fall curve and overstate the noise (in our bank and synthetic
presets they cut the recall of every noise-scaled rule by a third or more). The spread is the mean
absolute deviation from the median, ``* sqrt(pi / 2)``: robust to a few jumps, and, unlike the
median absolute deviation, not 0 on discretised scores (accuracy on n prompts moves in steps of
1/n, so most differences are equal); times sqrt(m / (m - 1)) for m differences, because the
deviation from a sample's own median is smaller than from the true centre.
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist, median

from ._base import Eval, State

#: How many of the most recent second differences the online estimate keeps (``push_value``):
#: a rule's memory bound. Up to SIGMA_WINDOW + 2 valid scores the online estimate equals
#: ``curve_sigma`` of the whole history up to float rounding (docs/noise-rules.md).
SIGMA_WINDOW = 64
#: Bounds of the noise rules' parameters: the smallest test level whose critical value is finite
#: (1 - alpha must differ from 1 in floating point), the largest z and eval sample size.
MIN_ALPHA = 1e-12
MAX_Z = 100.0
MAX_ITEMS = 10**12

#: Mean absolute deviation of a normal sample divided by its sd, sqrt(2 / pi).
MEAN_AD_PER_SD = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True, slots=True)
class ItemEval(Eval):
    """An eval that also carries its per-item scores (one per eval prompt, in a fixed order).

    ``score`` is still the value the rules watch (normally the mean of ``items``). Two evals of
    the same job must list the same prompts in the same order for a paired comparison.
    """

    items: tuple[float, ...] = ()


def curve_sigma(values: Sequence[float]) -> float | None:
    """The noise sd of one eval, estimated from the second differences of ``values``.

    None with fewer than three values. Can be 0 (a noiseless or piecewise-linear curve).
    """
    if len(values) < 3:
        return None
    second = [c - 2.0 * b + a for a, b, c in zip(values, values[1:], values[2:], strict=False)]
    centre = median(second)
    mean_ad = math.fsum(abs(d - centre) for d in second) / len(second)
    small_sample = math.sqrt(len(second) / (len(second) - 1)) if len(second) > 1 else 1.0
    return small_sample * mean_ad / (MEAN_AD_PER_SD * math.sqrt(6.0))


def sigma_state() -> State:
    """The keys of a rule state that ``push_value``/``online_sigma`` maintain: the last two
    values, and the window of second differences in arrival order and sorted."""
    return {"sigma_tail": [], "sigma_diffs": [], "sigma_sorted": []}


def push_value(state: State, value: float) -> None:
    """Add the next valid score to the online noise estimate in ``state`` (in place). Keeps the
    last ``SIGMA_WINDOW`` second differences; a non-finite difference (overflow) is dropped."""
    tail = state["sigma_tail"]
    if len(tail) < 2:
        tail.append(value)
        return
    diff = value - 2.0 * tail[1] + tail[0]
    tail[0], tail[1] = tail[1], value
    if not math.isfinite(diff):
        return
    diffs, ordered = state["sigma_diffs"], state["sigma_sorted"]
    diffs.append(diff)
    insort(ordered, diff)
    if len(diffs) > SIGMA_WINDOW:
        del ordered[bisect_left(ordered, diffs.pop(0))]


def online_sigma(state: State) -> float | None:
    """``curve_sigma`` over the second differences in the window of ``state`` (equal to it, up
    to float rounding, while the window holds every difference); None before three values.

    The sum of absolute deviations from the median is the sum of the upper half of the sorted
    window minus the sum of its lower half (the median itself, if any, deviates by 0), so one
    estimate costs two C-level sums over the sorted window and no per-value Python work.
    """
    ordered = state["sigma_sorted"]
    m = len(ordered)
    if m == 0:
        return None
    half = m // 2
    try:
        mean_dev = (math.fsum(ordered[m - half :]) - math.fsum(ordered[:half])) / m
    except OverflowError:
        mean_dev = math.inf
    if not math.isfinite(mean_dev):  # differences near the float limit: scale each one first
        mean_dev = math.fsum(x / m for x in ordered[m - half :]) - math.fsum(x / m for x in ordered[:half])
    small_sample = math.sqrt(m / (m - 1)) if m > 1 else 1.0
    return small_sample * max(mean_dev, 0.0) / (MEAN_AD_PER_SD * math.sqrt(6.0))


def finite_items(ev: Eval) -> tuple[float, ...] | None:
    """The per-item scores of ``ev`` when it has at least two and all are finite, else None."""
    items = getattr(ev, "items", None)
    if not items or len(items) < 2 or not all(math.isfinite(x) for x in items):
        return None
    return tuple(items)


def mean_and_se(items: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample sd / sqrt(n)) of at least two finite values; both finite
    (a standard error beyond the float range is the largest float)."""
    n = len(items)
    try:
        mean = math.fsum(items) / n
        var = math.fsum((x - mean) * (x - mean) for x in items) / (n - 1)
    except OverflowError:
        var = math.inf
    if math.isfinite(var):
        return mean, math.sqrt(var / n)
    scale = max(abs(x) for x in items)  # values near the float limit: the same on values <= 1
    mean, se = mean_and_se([x / scale for x in items])
    return mean * scale, min(se * scale, sys.float_info.max)


@lru_cache(maxsize=256)
def z_quantile(alpha: float) -> float:
    """The one-sided standard-normal critical value for level ``alpha``."""
    return NormalDist().inv_cdf(1.0 - alpha)
