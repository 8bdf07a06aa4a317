"""When a stopping rule kills a job: planned for a whole generated workload at once
(``batch_kills``), or job by job (``KillPlanning``, the part of ``ClusterSim`` that reads evals).

Batch plan.
On the fast path the simulator folds each watched job's whole eval sequence into a fresh
``Monitor`` at arrival, and keeps two numbers: the eval at which the rule fires (if it does) and
the best eval up to there (the checkpoint delivered). For a rule whose decision is a short
recurrence over the scores, those two numbers can be computed for every job at once, one eval
column at a time over a (jobs x evals) score matrix: the rule's own ``Detector.fold_rows``
(the paper's ``KDeclines`` has one). The scheduler says whether its monitors allow it
(``Scheduler.kill_plan``); a rule without ``fold_rows``, a scheduler whose monitors are made its
own way, or a workload whose evals are records, takes the per-job ``Monitor`` path (None here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..detectors import Monitor, Verdict
from ..schedulers import JobView, Scheduler
from ..workloads.table import DenseEvals, JobTable
from ._eval_time import timeline
from ._job import Job, Watch, eval_target_s, oracle_verdict

if TYPE_CHECKING:
    from ._config import SimConfig

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
    plan = scheduler.kill_plan()
    if not isinstance(table.evals, DenseEvals) or plan is None or plan.detector is None:
        return None
    if plan.kinds is None:
        watched = np.ones(len(table), dtype=bool)
    else:
        codes = [i for i, kind in enumerate(table.kinds) if kind in plan.kinds]
        watched = np.isin(table.kind, codes)
    planned = plan.detector.fold_rows(table.evals.score)
    if planned is None:
        return None
    stop, best = planned
    stop[~watched] = -1
    best[stop < 0] = -1
    return stop, best


class KillPlanning:
    """Per job: on the fast path, fold its evals into its monitor at arrival and note where it
    is killed; on the event path, feed its monitor one eval at a time (the attributes below
    are ``ClusterSim``'s)."""

    config: SimConfig
    table: JobTable
    _plan_kills: bool
    _monitor: Callable[[JobView], Monitor | None] | None
    _duration_s: list[float]
    _kill_s: list[float]
    _kill_best: list[int]
    _watches: dict[int, Watch]
    _eval_events: bool
    _needs_watch: bool
    #: Evals cost time or a cadence skips some (``_eval_time``): per row, the eval time (s)
    #: the job has spent by its end; None otherwise.
    _eval_s: list[float] | None
    _n_evals: list[int]

    def _plan(self, scheduler: Scheduler) -> None:
        """The truth, per row, out of the scheduler's reach: duration, and the attained service
        (s) at which a planned kill happens (inf: none) with the eval it delivers (-1: final).
        With timed evals the duration is the attained service at completion, evals included."""
        table, oracle = self.table, self.config.oracle
        self._duration_s = table.duration_s.tolist()
        timed = self.config.eval_cost > 0.0 or not scheduler.dense_evals
        self._eval_s = [0.0] * len(table) if timed else None
        self._n_evals = [0] * len(table) if timed else []
        batch = batch_kills(scheduler, table) if self._plan_kills and not (oracle or timed) else None
        if batch is None:
            n = len(table)
            self._kill_s, self._kill_best = [math.inf] * n, [-1] * n
        else:
            self._kill_s, self._kill_best = batch
        needs_evals = oracle or timed or self._eval_events or self._monitor is not None
        self._needs_watch = needs_evals and batch is None
        self._watches = {}  # event path: row -> the job's evals and monitor

    def _watch(self, job: Job) -> None:
        """The job's evals matter (a rule watches it, or the oracle): plan or prepare its kill."""
        idx = job.idx
        if self._eval_s is not None:
            self._watch_timed(job)
        elif self._plan_kills:
            verdict = self._plan_kill(job)
            if verdict is not None and verdict.stop_index is not None:
                progress = self.table.evals.progress_of(idx)[verdict.stop_index]
                self._kill_s[idx] = eval_target_s(self._duration_s[idx], progress)
                best = verdict.best_index
                self._kill_best[idx] = -1 if best is None else best
        else:
            monitor = None if self._monitor is None else self._monitor(job)
            self._watches[idx] = Watch(self.table.evals.row(idx), monitor, self._duration_s[idx])

    def _watch_timed(self, job: Job) -> None:
        """``_watch`` when evals take time or a cadence skips some: the job's timeline
        (``_eval_time``) sets its duration, and its kill (fast path) or its eval events."""
        idx, table = job.idx, self.table
        evals = table.evals.row(idx)
        monitor = None if self._monitor is None else self._monitor(job)
        oracle_stop = None
        if self.config.oracle:
            monitor = None
            verdict = oracle_verdict(table, idx) if table.hacking[idx] else None
            if verdict is not None and verdict.stop_index is not None:
                oracle_stop = (verdict.stop_index, verdict.stop_index)
        plan = timeline(evals, self._duration_s[idx], self.config.eval_cost, monitor, oracle_stop)
        assert self._eval_s is not None
        self._duration_s[idx], self._eval_s[idx] = plan.duration_s, plan.eval_s
        self._n_evals[idx] = len(plan.used)
        if self._plan_kills:
            if plan.stop is not None:
                self._kill_s[idx], self._kill_best[idx] = plan.ends[-1], plan.best
            return
        monitor = None if self._monitor is None else self._monitor(job)  # a fresh one, fed by events
        run = tuple(evals[i] for i in plan.used)
        self._watches[idx] = Watch(run, monitor, self._duration_s[idx], plan.ends, plan.used)

    def _plan_kill(self, job: Job) -> Verdict | None:
        """Fast path: fold the job's whole eval sequence into its monitor once, at arrival."""
        if self.config.oracle:
            return oracle_verdict(self.table, job.idx) if self.table.hacking[job.idx] else None
        monitor = None if self._monitor is None else self._monitor(job)
        if monitor is None:
            return None
        return monitor.verdict if monitor.fold(self.table.evals.row(job.idx)) else None

    def _eval_fired(self, job: Job, attained: float) -> int | None:
        """Event path: feed the job's monitor every eval up to ``attained``; the eval to deliver
        (-1: the final checkpoint) if the rule fires, else None."""
        watch = self._watches[job.idx]
        monitor, targets = watch.monitor, watch.targets
        while watch.next_eval < len(targets) and targets[watch.next_eval] <= attained:
            watch.next_eval += 1
            if monitor is None:
                continue
            verdict = monitor.observe(watch.evals[watch.next_eval - 1])
            if monitor.fired_now:
                del self._watches[job.idx]
                return -1 if verdict.best_index is None else watch.dense_index(verdict.best_index)
        if attained >= self._duration_s[job.idx]:
            del self._watches[job.idx]  # it completes now (the event path plans no kill)
        return None
