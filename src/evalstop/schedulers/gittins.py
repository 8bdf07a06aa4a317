"""Discretised Gittins index policy on the job-size distribution (Tiresias's 2D-Gittins).

For a job that has attained ``a`` GPU-seconds, with size ``S`` drawn from the size distribution,

    G(a) = max over quanta D of  P(S - a <= D | S > a) / E[min(S - a, D) | S > a],

the best rate (completion probability per GPU-second) the job can offer. On an empirical sample
the maximum over D >= D_min is reached at D_min or at a sample point (between points the
numerator is flat and the denominator grows), so with remaining sizes r_1 <= ... <= r_m it is
max_k k / (r_1 + ... + r_k + (m - k) r_k) over the points r_k >= D_min, and the point D_min.

Like Tiresias, the index is evaluated only at queue boundaries: a job in queue q gets G(lower
threshold of q), computed once in the constructor. Because a job is re-ranked only when it
crosses the next threshold, the default minimum quantum D_min is the queue's width (infinite in
the last queue). Without a minimum (D_min = 0) the k = 1 term 1 / (m r_1) makes the index hinge
on how close the nearest sampled size happens to lie above the boundary. Higher index first;
ties FIFO by arrival.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _snap
from .._validation import InvalidParameterError, check_float, check_int
from ._base import JobView
from .las import DEFAULT_THRESHOLDS_GPU_S, HOUR_S, QueueLadder

#: Default size sample: lognormal, median 2 GPU-hours, log-sd 1.5 (heavy-tailed), 10,000 draws.
DEFAULT_MEDIAN_GPU_S = 2 * HOUR_S
DEFAULT_LOG_SIGMA = 1.5
DEFAULT_N_SAMPLES = 10_000
#: ln(DEFAULT_MEDIAN_GPU_S) from decimal arithmetic: the same on every machine, unlike a libm log.
LOG_MEDIAN = float(Decimal(DEFAULT_MEDIAN_GPU_S).ln())


def gittins_index(
    sorted_sizes_gpu_s: NDArray[np.float64], attained_gpu_s: float, min_quantum_gpu_s: float = 0.0
) -> float:
    """G(a) for an ascending size sample, maximised over quanta >= ``min_quantum_gpu_s`` (inf:
    run to completion, G = 1 / mean residual size). 0.0 when no sampled size exceeds
    ``attained_gpu_s``: the job has outlived every known size, so nothing says it ends soon."""
    start = int(np.searchsorted(sorted_sizes_gpu_s, attained_gpu_s, side="right"))
    remaining = sorted_sizes_gpu_s[start:] - attained_gpu_s
    m = remaining.size
    if m == 0:
        return 0.0
    work = np.cumsum(remaining)
    if math.isinf(min_quantum_gpu_s):
        return float(m / work[-1])
    # Quantum exactly min_quantum (j remaining sizes fit in it), then every larger sample point.
    j = int(np.searchsorted(remaining, min_quantum_gpu_s, side="right"))
    best = j / (work[j - 1] + (m - j) * min_quantum_gpu_s) if j else 0.0
    if j < m:
        k = np.arange(j + 1, m + 1, dtype=np.float64)
        expected_work = work[j:] + (m - k) * remaining[j:]  # m * E[min(S - a, r_k) | S > a]
        best = max(best, float(np.max(k / expected_work)))
    return float(best)


def _check_sizes(owner: str, value: ArrayLike) -> NDArray[np.float64]:
    try:
        sizes = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        sizes = np.empty(0)
        bad_type = True
    else:
        bad_type = sizes.ndim != 1 or sizes.size == 0
    if bad_type:
        raise InvalidParameterError(
            f"The 'sizes_gpu_s' parameter of {owner} must be a non-empty 1-D sequence of numbers. "
            f"Got {value!r} instead."
        )
    bad = np.flatnonzero(~(np.isfinite(sizes) & (sizes > 0)))
    if bad.size:
        i = int(bad[0])
        check_float(owner, f"sizes_gpu_s[{i}]", float(sizes[i]), low=0.0, low_open=True)
    return np.sort(sizes)


class Gittins(QueueLadder):
    """Gittins index on a sample of job sizes in GPU-seconds; preemptive.

    ``sizes_gpu_s`` is the empirical size sample (e.g. the workload's declared budgets, see
    :meth:`from_budgets`). Without one, a lognormal sample (median 2 GPU-hours, log-sd 1.5,
    10,000 draws) is drawn from a private generator seeded with ``seed``. ``min_quantum_gpu_s``
    is the smallest quantum the index maximises over: None (default) uses each queue's width,
    a number uses that fixed minimum for every queue (0 = every quantum).
    """

    name = "gittins"
    static_rank = True  # the index changes only at queue thresholds (next_change_s milestones)

    def __init__(
        self,
        sizes_gpu_s: ArrayLike | None = None,
        thresholds_gpu_s: Sequence[float] = DEFAULT_THRESHOLDS_GPU_S,
        min_quantum_gpu_s: float | None = None,
        seed: int = 0,
        preemptive: bool = True,
        backfill: bool = True,
    ) -> None:
        super().__init__(thresholds_gpu_s, preemptive, backfill)
        if min_quantum_gpu_s is not None:
            check_float("Gittins", "min_quantum_gpu_s", min_quantum_gpu_s, low=0.0)
        check_int("Gittins", "seed", seed, min_value=0)
        self.min_quantum_gpu_s = min_quantum_gpu_s
        self.seed = seed
        if sizes_gpu_s is None:
            rng = np.random.default_rng(seed)
            sample = _snap.exp(rng.normal(LOG_MEDIAN, DEFAULT_LOG_SIGMA, DEFAULT_N_SAMPLES))
            self.sizes_gpu_s = np.sort(sample)
        else:
            self.sizes_gpu_s = _check_sizes("Gittins", sizes_gpu_s)
        lower = (0.0, *self.thresholds_gpu_s)
        upper = (*self.thresholds_gpu_s, math.inf)
        quanta = [
            (hi - lo) if min_quantum_gpu_s is None else min_quantum_gpu_s
            for lo, hi in zip(lower, upper, strict=True)
        ]
        #: G at the lower boundary of each queue (1 / GPU-second).
        self.queue_index = tuple(
            gittins_index(self.sizes_gpu_s, lo, dq) for lo, dq in zip(lower, quanta, strict=True)
        )
        self._neg_index = tuple(-g for g in self.queue_index)

    @classmethod
    def from_budgets(
        cls,
        budgets_gpu_s: ArrayLike,
        thresholds_gpu_s: Sequence[float] = DEFAULT_THRESHOLDS_GPU_S,
        min_quantum_gpu_s: float | None = None,
    ) -> Gittins:
        """Use the workload's declared budgets (GPUs x budget_s) as the size sample. Budgets are
        what users declare, not true durations, so no ground truth leaks into the policy."""
        return cls(budgets_gpu_s, thresholds_gpu_s, min_quantum_gpu_s)

    def index(self, job: JobView) -> float:
        return self.queue_index[self.queue(job)]

    def rank_key(self, job: JobView) -> tuple[Any, ...]:
        queue = bisect_right(self._bounds, job.attained_s * job.gpus)
        return (self._neg_index[queue], job.arrival_s, job.job_id)

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=self.rank_key)

    def __repr__(self) -> str:
        return (
            f"Gittins(n_sizes={self.sizes_gpu_s.size}, thresholds_gpu_s={self.thresholds_gpu_s!r}, "
            f"min_quantum_gpu_s={self.min_quantum_gpu_s!r}, seed={self.seed})"
        )
