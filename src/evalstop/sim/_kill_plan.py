"""The fast eval path's kill plan for a whole generated workload at once.

On the fast path the simulator folds each watched job's whole eval sequence into a fresh
``Monitor`` at arrival, and keeps two numbers: the eval at which the rule fires (if it does) and
the best eval up to there (the checkpoint delivered). For a rule whose decision is a short
recurrence over the scores, those two numbers can be computed for every job at once, one eval
column at a time over a (jobs x evals) score matrix: the rule's own ``Detector.fold_rows``
(the paper's ``KDeclines`` has one). A rule without it, a scheduler that builds its monitors its
own way, or a workload whose evals are records, takes the per-job ``Monitor`` path (None here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..schedulers import EvalStop, Scheduler
from ..workloads.table import DenseEvals, JobTable

Array = np.ndarray[Any, Any]


def batch_plan(scheduler: Scheduler, table: JobTable) -> tuple[list[int], list[int]] | None:
    """(stop index, best index) of every row, -1 where the rule never fires or does not watch
    the job; None if this scheduler/workload must be planned job by job."""
    planned = _batch_arrays(scheduler, table)
    return None if planned is None else (planned[0].tolist(), planned[1].tolist())


def batch_kills(scheduler: Scheduler, table: JobTable) -> tuple[list[float], list[int]] | None:
    """What the simulator reads of a batch plan: per row, the attained service (s) at which the
    job is killed (inf: never) and the eval it delivers then (-1: none); None as ``batch_plan``.
    The service is the eval's progress times the duration, the one float product the per-job
    path computes."""
    planned = _batch_arrays(scheduler, table)
    if planned is None:
        return None
    stop, best = planned
    assert isinstance(table.evals, DenseEvals)
    fires = stop >= 0
    kill_s = np.full(len(table), np.inf)
    kill_s[fires] = table.duration_s[fires] * table.evals.progress[stop[fires]]
    best[fires & (best < 0)] = table.evals.progress.size - 1  # as a per-job plan reads index -1
    return kill_s.tolist(), best.tolist()


def _batch_arrays(scheduler: Scheduler, table: JobTable) -> tuple[Array, Array] | None:
    if not isinstance(table.evals, DenseEvals) or not _plain_evalstop(scheduler):
        return None
    assert isinstance(scheduler, EvalStop)
    rule = scheduler.detector
    if scheduler.watch is None:
        watched = np.ones(len(table), dtype=bool)
    else:
        codes = [i for i, kind in enumerate(table.kinds) if kind in scheduler.watch]
        watched = np.isin(table.kind, codes)
    planned = rule.fold_rows(table.evals.score)
    if planned is None:
        return None
    stop, best = planned
    stop[~watched] = -1
    best[stop < 0] = -1
    return stop, best


def _plain_evalstop(scheduler: Scheduler) -> bool:
    """EvalStop whose monitors are ``Monitor(detector)`` for watched jobs and none otherwise."""
    if not isinstance(scheduler, EvalStop):
        return False
    cls = type(scheduler)
    if cls.monitor is not EvalStop.monitor or cls.watches is not EvalStop.watches:
        return False
    return type(scheduler.base).monitor is Scheduler.monitor
