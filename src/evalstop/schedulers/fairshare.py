"""Per-tenant weighted fair share of GPUs (weighted max-min, recomputed at every decision)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from .._validation import InvalidParameterError, check_float
from ._base import JobView, Scheduler


class FairShare(Scheduler):
    """Interleave tenants so that each gets GPUs in proportion to its weight.

    ``order`` builds the ranking one job at a time: the next job is the oldest job of the tenant
    with the smallest (GPUs of its jobs ranked so far) / weight; ties go to the tenant whose
    next job arrived first. GPUs are counted as requested by ranked jobs, not as actually placed,
    and nothing is remembered between calls (instantaneous share, no usage history). Tenants
    absent from ``weights`` weigh 1. Preemptive: a tenant over its share loses GPUs to others.
    """

    name = "fair"
    preemptive = True

    def __init__(self, weights: Mapping[int, float] | None = None) -> None:
        if weights is None:
            weights = {}
        if not isinstance(weights, Mapping):
            raise InvalidParameterError(
                f"The 'weights' parameter of FairShare must be a mapping tenant -> weight. "
                f"Got {weights!r} instead."
            )
        for tenant, w in weights.items():
            check_float("FairShare", f"weights[{tenant!r}]", w, low=0.0, low_open=True)
        self.weights = {tenant: float(w) for tenant, w in weights.items()}

    def order(self, jobs: Sequence[JobView], now: float) -> list[JobView]:
        queues: dict[int, list[JobView]] = {}
        for job in sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)):
            queues.setdefault(job.tenant, []).append(job)
        weight = self.weights.get
        # (share, next job's arrival, next job's id, tenant, position in the tenant's queue)
        heap = [(0.0, q[0].arrival_s, q[0].job_id, t, 0) for t, q in queues.items()]
        heapq.heapify(heap)
        given = dict.fromkeys(queues, 0)
        ranked: list[JobView] = []
        while heap:
            _, _, _, tenant, pos = heapq.heappop(heap)
            queue = queues[tenant]
            job = queue[pos]
            ranked.append(job)
            given[tenant] += job.gpus
            if pos + 1 < len(queue):
                nxt = queue[pos + 1]
                share = given[tenant] / weight(tenant, 1.0)
                heapq.heappush(heap, (share, nxt.arrival_s, nxt.job_id, tenant, pos + 1))
        return ranked

    def __repr__(self) -> str:
        return f"FairShare(weights={self.weights!r})"
