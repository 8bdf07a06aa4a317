"""A sweep's unit of work, :class:`Task` (a point and a seed), and the pure function that runs
one, :func:`run_point`: what every backend of :mod:`.sweep` (this process, a process pool, Ray
tasks in :mod:`._ray`) calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..workloads import Workload, generate
from ..workloads.bank import bank_workload, load_bank
from .runner import run_policies
from .spec import PointSpec

Row = dict[str, Any]


def run_point(point: PointSpec, seed: int) -> list[Row]:
    """Pure: the workload of ``seed``, every policy of ``point`` on it, one row per policy."""
    return run_policies(_workload(point, seed), point.policies, point.sim, jct_cdf=point.jct_cdf)


def _workload(point: PointSpec, seed: int) -> Workload:
    if point.jobs_csv is not None:
        from ..workloads.jobs_csv import load_jobs_csv

        return load_jobs_csv(point.jobs_csv, point.workload, seed)
    if point.trace is None:
        jobs = generate(point.workload, seed)
    else:
        from ..workloads.philly import generate_from_trace

        jobs = generate_from_trace(point.workload, point.trace, seed)
    if point.bank is None:
        return jobs
    return bank_workload(jobs, load_bank(point.bank), seed)


@dataclass(frozen=True)
class Task:
    """One unit of work: a point and a seed. ``key`` is the point's content hash."""

    key: str
    point: PointSpec
    seed: int

    @property
    def cost(self) -> float:
        """Rough relative cost, to start the big tasks first."""
        trace = 20.0 if self.point.trace is not None else 1.0
        return self.point.workload.n_jobs * len(self.point.policies) * trace
