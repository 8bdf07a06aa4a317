"""First in, first out: the null base policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._base import JobView, Scheduler


class FIFO(Scheduler):
    """Arrival order; never preempts. Strict by default: a wide job at the head of the queue
    blocks the jobs behind it (no starvation); ``backfill=True`` lets smaller jobs start in the
    GPUs it cannot use yet."""

    name = "fifo"
    preemptive = False
    static_rank = True

    def __init__(self, backfill: bool = False) -> None:
        self.backfill = backfill

    def rank_key(self, job: JobView) -> tuple[Any, ...]:
        return (job.arrival_s, job.job_id)

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=self.rank_key)
