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
    return stop.tolist(), best.tolist()


def _plain_evalstop(scheduler: Scheduler) -> bool:
    """EvalStop whose monitors are ``Monitor(detector)`` for watched jobs and none otherwise."""
    if not isinstance(scheduler, EvalStop):
        return False
    cls = type(scheduler)
    if cls.monitor is not EvalStop.monitor or cls.watches is not EvalStop.watches:
        return False
    return type(scheduler.base).monitor is Scheduler.monitor
