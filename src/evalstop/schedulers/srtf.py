"""Shortest remaining time first on the *estimated* remaining time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._base import JobView, Scheduler


class SRTFEst(Scheduler):
    """Rank by declared budget minus attained service (wall seconds on the job's GPUs).

    The budget is the user's estimate; its error comes from the workload
    (``budget_error_sigma``). A job past its estimate has an estimated remaining time of 0 and
    ranks first, as an SRTF-Est deployment would treat it. ``gpu_weighted`` ranks by remaining
    GPU-seconds instead. ``preemptive=False`` gives shortest-job-first on the estimate (exact
    SJF when budgets are true durations); ``backfill=False`` makes the best-ranked job that does
    not fit block the jobs behind it.
    """

    name = "srtf"
    preemptive = True
    static_rank = True  # a waiting job's remaining time is fixed; a running job's only shrinks

    def __init__(self, gpu_weighted: bool = False, preemptive: bool = True, backfill: bool = True) -> None:
        self.gpu_weighted = gpu_weighted
        self.preemptive = preemptive
        self.backfill = backfill

    def rank_key(self, job: JobView) -> tuple[Any, ...]:
        left = job.budget_s - job.attained_s  # the estimated remaining service (the declared budget left)
        left = left if left > 0 else 0.0
        return (left * job.gpus if self.gpu_weighted else left, job.arrival_s, job.job_id)

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=self.rank_key)
