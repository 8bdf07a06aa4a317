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
#: Relative time tolerance of a promotion check (the simulator's TIME_TOL_S).
PROMOTE_TOL_S = 1e-12


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

    ``promote_after_wait_s`` (default None: off) is Tiresias's starvation guard in absolute
    form: a job that has waited that many seconds since it last ran (or since it arrived) is
    promoted to queue 0, and its queue is counted from the service it had at promotion, so it
    keeps queue 0 for one threshold's worth of service before demoting again.
    ``promote_after_wait_ratio`` (default None: off) is the guard in Tiresias's ratio form
    (STARVELIMIT): a job is promoted once it has waited that multiple of its last run (the
    wall seconds it held its GPUs the last time it ran for a positive time, restore overhead
    included); a job that has never run is in queue 0 already and is not promoted. Set at most
    one of the two. Promotion takes effect at that exact instant: ``wake_at_s`` asks the
    simulator for a timer event. With a guard on, a waiting job's rank changes while it waits,
    so the static-rank contract is off and the simulator ranks by ``order``.
    """

    name = "las"
    static_rank = True  # the queue changes only at next_change_s milestones (guard off)

    def __init__(
        self,
        thresholds_gpu_s: Sequence[float] = DEFAULT_THRESHOLDS_GPU_S,
        preemptive: bool = True,
        backfill: bool = True,
        promote_after_wait_s: float | None = None,
        promote_after_wait_ratio: float | None = None,
    ) -> None:
        super().__init__(thresholds_gpu_s, preemptive, backfill)
        owner = type(self).__name__
        if promote_after_wait_s is not None and promote_after_wait_ratio is not None:
            raise InvalidParameterError(
                f"{owner} takes one starvation guard: 'promote_after_wait_s' (absolute) or "
                f"'promote_after_wait_ratio' (Tiresias's ratio form), not both. Got "
                f"promote_after_wait_s={promote_after_wait_s!r} and "
                f"promote_after_wait_ratio={promote_after_wait_ratio!r} instead."
            )
        if promote_after_wait_s is not None:
            check_float(owner, "promote_after_wait_s", promote_after_wait_s, low=0.0, low_open=True)
            promote_after_wait_s = float(promote_after_wait_s)
        if promote_after_wait_ratio is not None:
            check_float(owner, "promote_after_wait_ratio", promote_after_wait_ratio, low=0.0, low_open=True)
            promote_after_wait_ratio = float(promote_after_wait_ratio)
        self.promote_after_wait_s = promote_after_wait_s
        self.promote_after_wait_ratio = promote_after_wait_ratio
        self._guard = promote_after_wait_s is not None or promote_after_wait_ratio is not None
        if self._guard:
            self.static_rank = False
        self._wait_since: dict[int, float] = {}  # job id -> when it last started waiting
        self._base_gpu_s: dict[int, float] = {}  # job id -> attained GPU-s at its last promotion
        self._run_since: dict[int, float] = {}  # job id -> when it last started (ratio form)
        self._last_run_s: dict[int, float] = {}  # job id -> its last positive run, s (ratio form)

    # -- starvation guard bookkeeping (only used when a guard is on) ----------------------
    def on_job_add(self, job: JobView, now: float) -> None:
        if self._guard:
            self._wait_since[job.job_id] = now

    def on_start(self, job: JobView, now: float) -> None:
        if self.promote_after_wait_ratio is not None:
            self._run_since[job.job_id] = now

    def on_stop(self, job: JobView, now: float) -> None:
        if not self._guard:
            return
        self._wait_since[job.job_id] = now
        if self.promote_after_wait_ratio is not None:
            ran = now - self._run_since.pop(job.job_id, now)
            if ran > 0.0:
                self._last_run_s[job.job_id] = ran

    def on_job_end(self, job: JobView, now: float) -> None:
        for bookkeeping in (self._wait_since, self._base_gpu_s, self._run_since, self._last_run_s):
            bookkeeping.pop(job.job_id, None)

    def _wait_limit_s(self, job: JobView) -> float | None:
        """How long ``job`` may wait before promotion (None: it is not promoted)."""
        if self.promote_after_wait_ratio is None:
            return self.promote_after_wait_s
        last_run = self._last_run_s.get(job.job_id)
        return None if last_run is None else self.promote_after_wait_ratio * last_run

    def wake_at_s(self, job: JobView, now: float) -> float | None:
        limit = self._wait_limit_s(job) if self._guard else None
        if limit is None:
            return None
        return self._wait_since.get(job.job_id, now) + limit

    def _promote_due(self, jobs: Sequence[JobView], now: float) -> None:
        if not self._guard:
            return
        # Same tolerance as the simulator's notion of "now" (an event due within round-off).
        horizon = now + PROMOTE_TOL_S * max(1.0, abs(now))
        for job in jobs:
            if job.running:
                continue
            limit = self._wait_limit_s(job)
            if limit is not None and self._wait_since.get(job.job_id, now) + limit <= horizon:
                self._base_gpu_s[job.job_id] = job.attained_s * job.gpus

    def queue(self, job: JobView) -> int:
        base = self._base_gpu_s.get(job.job_id, 0.0)
        return bisect_right(self._bounds, job.attained_s * job.gpus - base)

    def next_change_s(self, job: JobView) -> float | None:
        q = self.queue(job)
        if q >= len(self.thresholds_gpu_s) or job.gpus <= 0:
            return None
        return (self.thresholds_gpu_s[q] + self._base_gpu_s.get(job.job_id, 0.0)) / job.gpus

    def rank_key(self, job: JobView) -> tuple[Any, ...]:
        return (self.queue(job), job.arrival_s, job.job_id)

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        self._promote_due(jobs, now)
        return sorted(jobs, key=self.rank_key)

    def __repr__(self) -> str:
        extra = ""
        for name in ("promote_after_wait_s", "promote_after_wait_ratio"):
            if getattr(self, name) is not None:
                extra = f", {name}={getattr(self, name)!r}"
        return f"{type(self).__name__}(thresholds_gpu_s={self.thresholds_gpu_s!r}{extra})"
