"""The fast eval path's kill plan for a whole generated workload at once.

On the fast path the simulator folds each watched job's whole eval sequence into a fresh
``Monitor`` at arrival, and keeps two numbers: the eval at which the rule fires (if it does) and
the best eval up to there (the checkpoint delivered). For a rule whose decision is a short
recurrence over the scores, those two numbers can be computed for every job at once, one eval
column at a time over a (jobs x evals) score matrix. :func:`batch_plan` does so for
:class:`~evalstop.detectors.KDeclines` (the paper's rule), with the same float comparisons as
``KDeclines.step`` in the same order; ``tests/test_sim_columnar.py`` holds it equal to
``Monitor.fold`` on random matrices with NaN/inf scores, both modes, both references, warm-up
and ``min_delta``. Any other rule, a scheduler that builds its monitors its own way, or a
workload whose evals are records, takes the per-job ``Monitor`` path (None here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..detectors import KDeclines
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
    if type(rule) is not KDeclines:
        return None
    if scheduler.watch is None:
        watched = np.ones(len(table), dtype=bool)
    else:
        codes = [i for i, kind in enumerate(table.kinds) if kind in scheduler.watch]
        watched = np.isin(table.kind, codes)
    stop, best = kdeclines_plan(rule, table.evals.score)
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


def kdeclines_plan(rule: KDeclines, scores: Array) -> tuple[Array, Array]:
    """``KDeclines.step`` folded over each row of ``scores``: (index of the eval where the rule
    first fires or -1, index of the best valid eval up to there or -1)."""
    n, n_evals = scores.shape
    sign_max = rule.mode == "max"
    best = np.zeros(n)
    previous = np.zeros(n)
    has_best = np.zeros(n, dtype=bool)
    has_previous = np.zeros(n, dtype=bool)
    best_index = np.full(n, -1, dtype=np.int64)
    stop = np.full(n, -1, dtype=np.int64)
    n_valid = np.zeros(n, dtype=np.int64)
    run = np.zeros(n, dtype=np.int64)
    active = np.ones(n, dtype=bool)
    against_best = rule.against == "best"
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(n_evals):
            score = scores[:, j]
            valid = active & np.isfinite(score)
            if sign_max:
                improved = valid & (~has_best | (score > best))
            else:
                improved = valid & (~has_best | (score < best))
            reference, has_reference = (best, has_best) if against_best else (previous, has_previous)
            gap = reference - score if sign_max else score - reference
            declined = valid & has_reference & (gap > rule.min_delta)
            best = np.where(improved, score, best)
            best_index[improved] = j
            has_best |= improved
            previous = np.where(valid, score, previous)
            has_previous |= valid
            n_valid += valid
            counting = declined & (n_valid > rule.n_warmup_evals)
            run = np.where(counting, run + 1, np.where(valid, 0, run))
            fired = counting & (run >= rule.k)
            stop[fired] = j
            active &= ~fired
    return stop, best_index
