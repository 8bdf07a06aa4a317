"""Tiresias-style discretised two-dimensional least attained service (2D-LAS).

Service is counted in GPU-seconds (GPUs x wall seconds run), so a wide job climbs the queue
ladder as fast as its width makes it consume the cluster. :class:`QueueLadder` holds the
thresholds shared by :class:`LAS` and :class:`~evalstop.schedulers.gittins.Gittins`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from .._validation import InvalidParameterError, check_float
from ._base import JobView, Scheduler

HOUR_S = 3600.0
#: Queue thresholds in GPU-seconds: 1, 8 and 64 GPU-hours (four queues).
DEFAULT_THRESHOLDS_GPU_S: tuple[float, ...] = (1 * HOUR_S, 8 * HOUR_S, 64 * HOUR_S)
#: A job counts as having crossed a threshold once within this relative distance of it, so a
#: re-rank event scheduled at ``next_change_s`` always moves the job despite float rounding.
CROSSING_RTOL = 1e-9


def check_thresholds(owner: str, value: object) -> tuple[float, ...]:
    """Validate strictly increasing, finite, positive thresholds; return them as floats."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidParameterError(
            f"The 'thresholds_gpu_s' parameter of {owner} must be a sequence of numbers. "
            f"Got {value!r} instead."
        )
    items = tuple(value)
    for i, t in enumerate(items):
        check_float(owner, f"thresholds_gpu_s[{i}]", t, low=0.0, low_open=True)
    if any(b <= a for a, b in pairwise(items)):
        raise InvalidParameterError(
            f"The 'thresholds_gpu_s' parameter of {owner} must be strictly increasing. Got {items!r} instead."
        )
    return tuple(float(t) for t in items)


class QueueLadder(Scheduler):
    """Queues separated by attained-service thresholds (GPU-seconds); preemptive.

    Queue index = number of thresholds <= ``job.attained_gpu_s`` (0 for a new job). A running
    job's rank can change only when it crosses the next threshold, which ``next_change_s``
    reports in the job's own attained wall seconds (threshold / GPUs).
    """

    preemptive = True

    def __init__(
        self,
        thresholds_gpu_s: Sequence[float] = DEFAULT_THRESHOLDS_GPU_S,
        preemptive: bool = True,
        backfill: bool = True,
    ) -> None:
        self.thresholds_gpu_s = check_thresholds(type(self).__name__, thresholds_gpu_s)
        self.preemptive = preemptive
        self.backfill = backfill
        self._bounds = tuple(t * (1.0 - CROSSING_RTOL) for t in self.thresholds_gpu_s)

    @property
    def n_queues(self) -> int:
        return len(self.thresholds_gpu_s) + 1

    def queue(self, job: JobView) -> int:
        return bisect_right(self._bounds, job.attained_s * job.gpus)

    def next_change_s(self, job: JobView) -> float | None:
        q = self.queue(job)
        if q >= len(self.thresholds_gpu_s) or job.gpus <= 0:
            return None
        return self.thresholds_gpu_s[q] / job.gpus

    def __repr__(self) -> str:
        return f"{type(self).__name__}(thresholds_gpu_s={self.thresholds_gpu_s!r})"


class LAS(QueueLadder):
    """Discretised 2D-LAS (Tiresias): lower queue first; FIFO by arrival within a queue.

    Tiresias's starvation guard (promoting a job that waited too long back to queue 0) is not
    modelled.
    """

    name = "las"
    static_rank = True  # the queue changes only at next_change_s milestones

    def rank_key(self, job: JobView) -> tuple[Any, ...]:
        return (bisect_right(self._bounds, job.attained_s * job.gpus), job.arrival_s, job.job_id)

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=self.rank_key)
