"""First in, first out: the null base policy."""

from __future__ import annotations

from collections.abc import Sequence

from ._base import JobView, Scheduler


class FIFO(Scheduler):
    """Arrival order; never preempts."""

    name = "fifo"
    preemptive = False

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
