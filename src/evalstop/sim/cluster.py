"""The GPU-cluster simulation: jobs arrive, a scheduler ranks them, GPUs are gang-allocated.

Time is exact (float seconds, no ticks). A job progresses only while it holds its GPUs; after a
preemption it first pays ``preempt_overhead_s`` of GPU time to restore. Progress milestones
(evals, a planned kill, completion, a scheduler's rank change) are events at the exact time the
job's attained service reaches them.

Cost: each job costs a constant number of events, each O(log active jobs) on the heap, plus one
``Scheduler.order`` call over the active jobs whenever demand exceeds the cluster (static-rank
policies: width heaps instead, see ``waiting.py``). The workload is read as columns
(``JobTable``); arrivals come from it in arrival order, merged with the heap, and a job's state
exists only from its arrival to its end, when its outcome is written as six floats. Memory grows
with the jobs in the system plus a few numbers per job, not with per-job objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from heapq import heappop, heappush
from math import inf
from typing import Any

import numpy as np

from .._gc import cyclic_gc_paused
from ..schedulers import JobView, Scheduler
from ..workloads import Workload
from ._config import TIME_TOL_S, SimConfig, SimulationInvariantError
from ._inputs import (
    ARRIVED,
    COMPLETED,
    KILLED,
    PREEMPTED,
    STARTED,
    EventLog,
    arrival_jobs,
    check_jobs,
)
from ._job import DEPART, FLUSH, KILL, MILESTONE, RANK, TIMER, Job, OutcomeColumns
from ._kill_plan import KillPlanning
from .allocation import AllocationPasses, gpus_of
from .engine import Engine
from .outcome import SimResult
from .waiting import WidthHeaps

__all__ = ["TIME_TOL_S", "ClusterSim", "SimConfig", "SimulationInvariantError", "simulate"]

class ClusterSim(AllocationPasses, KillPlanning):
    def __init__(self, workload: Workload, scheduler: Scheduler, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.scheduler = scheduler
        self.total_gpus = workload.config.total_gpus
        self.table = table = workload.table
        check_jobs(table, self.total_gpus)
        self.seed = workload.seed
        self.workload = workload
        self.engine = Engine()
        self.running: dict[int, Job] = {}
        self.waiting: dict[int, Job] = {}
        self.used_gpus = 0
        self.waiting_gpus = 0
        self.busy_gpu_s = 0.0
        self._plan_kills = self.config.eval_path == "fast" or self.config.oracle
        self._eval_events = self.config.eval_path == "events" and not self.config.oracle
        self.events = EventLog()
        self._log_time, self._log_kind, self._log_id = self.events.appenders()
        self._outcomes = OutcomeColumns(table)
        self._record: Callable[[tuple[Any, ...]], None] = self._outcomes.record
        #: Static-rank policies (see ``Scheduler.static_rank``): waiting jobs in width heaps.
        self._static = scheduler.static_rank
        self._fill_only = self._static and not scheduler.preemptive  # a pass only starts jobs
        self._queue: WidthHeaps[Job] = WidthHeaps()
        self._unranked: list[Job] = []  # waiting jobs not yet in ``_queue``
        # The scheduler's hooks, None where it keeps the base class's no-op (not called at all).
        self._on_job_add = scheduler.hook("on_job_add")
        self._on_job_end = scheduler.hook("on_job_end")
        self._on_start, self._on_stop = scheduler.hook("on_start"), scheduler.hook("on_stop")
        self._next_change_s = scheduler.hook("next_change_s")
        self._monitor = scheduler.hook("monitor")
        rank_key = scheduler.hook("rank_key") or scheduler.rank_key
        self._rank_key: Callable[[JobView], tuple[Any, ...]] = rank_key
        self._plan(scheduler)
        self._outcomes.eval_s, self._outcomes.n_evals = self._eval_s, self._n_evals
        #: A job's next milestone is its kill or completion (no eval events, no rank changes).
        self._plain_next = not self._eval_events and self._next_change_s is None

    @property
    def log(self) -> list[tuple[float, str, int]]:
        """The event log as (time, event, job id) tuples, built on demand."""
        return self.events.entries()

    # -- the run -------------------------------------------------------------------------
    def run(self) -> SimResult:
        with cyclic_gc_paused():
            self._run_events()
        return self._result()

    def _run_events(self) -> None:
        """Pop events in (time, priority, insertion) order. Arrivals come from the workload in
        arrival order and are merged with the heap (an arrival sorts after every heap event of
        its time), which is the order of scheduling every arrival up front, without the heap.

        Every event of an instant first (departures sort before arrivals), then one allocation:
        a job due to finish now is never preempted now. "Now" spans float round-off
        (TIME_TOL_S): a job due at 0.1 + 0.2 finishes at an arrival at 0.3. If only stale
        timers (of preempted jobs) fired, a static-rank policy's allocation cannot change
        (waiting ranks are fixed, running ones only improve), so there is none."""
        arrivals = arrival_jobs(self.table)
        engine = self.engine
        heap, seq = engine.heap, engine.seq  # popped and pushed here directly (two a job)
        log_time, log_kind, log_id = self._log_time, self._log_kind, self._log_id
        waiting, running, unranked, static = self.waiting, self.running, self._unranked, self._static
        on_job_add, watch = self._on_job_add, self._needs_watch
        arrive_hooks = on_job_add is not None or watch
        milestone, start, total = self._milestone, self._start, self.total_gpus
        fill_only, backfill = self._fill_only, self.scheduler.backfill
        duration_s, kill_s, kill_best = self._duration_s, self._kill_s, self._kill_best
        outcomes = self._outcomes
        record, logged, flush = outcomes.record, self.events.times, self._flush
        killed_rows, delivered = outcomes.killed.append, outcomes.best.append  # ``outcomes.kill``
        # Plain: no hook at all and a job's only milestone is its kill or completion. Then a
        # job's start and end are inlined below (the same steps as ``_start`` and
        # ``_milestone``, less the hooks and milestones that cannot happen).
        plain = self._plain_next and not (self._on_start or self._on_stop or self._on_job_end)
        alone_starts = plain and static  # (a dynamic-rank policy may set a wake-up timer now)
        unwait = True
        arriving = next(arrivals)  # (the last is a sentinel arriving at inf)
        next_arrival = arriving.arrival_s
        busy = last = 0.0
        # GPUs in use and asked for by waiting jobs: locals here, the attributes' values
        # whenever a method that reads or changes them is called (synced around each call).
        used, queued = self.used_gpus, self.waiting_gpus
        while True:
            at = heap[0][0] if heap else inf
            now = next_arrival if next_arrival < at else at
            if now == inf:
                break
            busy += used * (now - last)
            last = now
            due_by = now + TIME_TOL_S * (now if now > 1.0 else 1.0)  # (time is never negative)
            changed = False
            starting: Iterable[Job] | None = None
            while True:  # every event of this instant
                if next_arrival < at:
                    job = arriving
                    log_time(now)
                    log_kind(ARRIVED)
                    log_id(job.job_id)
                    if arrive_hooks:
                        if on_job_add is not None:
                            on_job_add(job, now)
                        if watch:
                            self._watch(job)
                    arriving = next(arrivals)
                    next_arrival = arriving.arrival_s
                    if (alone_starts and not waiting and used + job.gpus <= total
                            and (next_arrival if next_arrival < at else at) > due_by):
                        # Alone in its instant, nothing waits and it fits: the allocation that
                        # closes the instant starts it, and only it. Skip the queue.
                        starting, unwait = (job,), False
                        break
                    waiting[job.job_id] = job
                    queued += job.gpus
                    if static:
                        # Ranked into the width heaps only if an allocation pass needs them (most
                        # jobs of an uncongested cluster start at once): its key cannot change.
                        unranked.append(job)
                    else:
                        engine.now = now
                        self._wake_timer(job, now)
                    changed = True
                else:
                    job, version, target, code = heappop(heap)[3]
                    if version == job.version:
                        changed = True
                    else:
                        code = TIMER  # a stale timer: nothing happens
                    if not code:
                        pass
                    elif not plain:
                        self.used_gpus, self.waiting_gpus, engine.now = used, queued, now
                        milestone(job, now, target, code)
                        used, queued = self.used_gpus, self.waiting_gpus
                    else:
                        # ``_milestone`` of a plain job: killed or completed (its end, inlined).
                        # (What no one reads once the job is gone is left as it is.)
                        n_preempt = job.n_preempt
                        if n_preempt:
                            elapsed, left = now - job.seg_start, job.overhead_left
                            overhead = job.gpu_s_overhead + (left if left < elapsed else elapsed) * job.gpus
                        else:
                            overhead = 0.0  # never restored: 0.0 + 0.0 * gpus, exactly
                        job.version += 1  # ``_release``: a timer of this job left behind is stale
                        del running[job.job_id]
                        used -= job.gpus
                        idx = job.idx
                        killed = code == KILL  # (kill_s[idx] <= target, known at the start)
                        log_time(now)
                        log_kind(KILLED if killed else COMPLETED)
                        log_id(job.job_id)
                        record((idx, job.first_start_s, now, target, overhead, n_preempt))
                        if len(logged) >= FLUSH:
                            flush()
                        if killed:
                            killed_rows(idx)
                            delivered(kill_best[idx])
                at = heap[0][0] if heap else inf
                if (next_arrival if next_arrival < at else at) > due_by:
                    break
            # The instant is over: allocate. Every waiting job fits: start them all. Otherwise a
            # non-preemptive static-rank policy starts the best-ranked that fit in the free GPUs
            # (``AllocationPasses._reschedule`` inlined); any other policy takes a full pass.
            if starting is not None:
                pass  # (a job alone in its instant)
            elif not waiting or not (changed or not static):
                continue
            elif used + queued <= total:
                if len(unranked) != len(waiting):  # some are in the width heaps
                    self._queue.clear()
                unranked.clear()
                starting, unwait = list(waiting.values()), True
            elif fill_only:
                if used >= total:
                    continue  # no job can start
                if unranked:
                    self._queue.push_all(unranked, gpus_of, self._rank_key)
                    unranked.clear()
                starting, unwait = self._queue.take(total - used, backfill), True
            else:
                self.used_gpus, self.waiting_gpus, engine.now = used, queued, now
                self._reschedule(now)
                used, queued = self.used_gpus, self.waiting_gpus
                continue
            for job in starting:
                if not plain or job.n_preempt:
                    self.used_gpus, self.waiting_gpus, engine.now = used, queued, now
                    start(job, now)
                    used, queued = self.used_gpus, self.waiting_gpus
                    continue
                job_id = job.job_id  # ``_start`` of a job that has never run
                if unwait:
                    del waiting[job_id]
                    queued -= job.gpus
                running[job_id] = job
                used += job.gpus
                job.first_start_s = job.seg_start = now
                job.running = True
                log_time(now)
                log_kind(STARTED)
                log_id(job_id)
                idx = job.idx
                target, kill = duration_s[idx], kill_s[idx]
                code = KILL if kill <= target else MILESTONE
                if kill < target:
                    target = kill
                # (no restore, no service yet: seg_start + 0.0 + (target - 0.0))
                heappush(heap, (now + target, DEPART, next(seq), (job, job.version, target, code)))
        self.used_gpus, self.waiting_gpus, self.busy_gpu_s, engine.now = used, queued, busy, last

    # -- milestones ----------------------------------------------------------------------
    def _milestone(self, job: Job, now: float, target: float, code: int) -> None:
        """The job's attained service reached ``target``: an eval, its kill, its completion or
        (``code`` RANK) a rank change.

        Its attained service is that target exactly (float round-off in now - seg_start must not
        leave it a hair short). An eval milestone that does not end the job leaves its running
        segment open, so the next milestone is timed from the segment's start, as on the fast
        path where no eval event lies between them: both paths compute the same times, bit for
        bit. A rank change, which both paths share, starts a new segment."""
        if code == RANK:
            self._close_segment(job, now)
            job.attained_at_seg = target
        job.attained_s = target
        idx = job.idx
        kill_best = self._eval_fired(job, target) if self._eval_events else None
        if kill_best is None:
            if self._kill_s[idx] <= target:
                kill_best = self._kill_best[idx]
            elif target < self._duration_s[idx]:
                self._schedule_next(job, target)
                return
        # The job ends: killed (delivering eval ``kill_best``, -1: its final checkpoint) or
        # completed (None). Its restore overhead is what it spent of it by now
        # (``_close_segment`` inlined: its service is known exactly).
        elapsed, left = now - job.seg_start, job.overhead_left
        job.gpu_s_overhead += (left if left < elapsed else elapsed) * job.gpus  # min(elapsed, left)
        self._release(job, now)
        if self._on_job_end is not None:
            self._on_job_end(job, now)
        self._log_time(now)
        self._log_kind(COMPLETED if kill_best is None else KILLED)
        self._log_id(job.job_id)
        self._record((idx, job.first_start_s, now, target, job.gpu_s_overhead, job.n_preempt))
        if len(self.events.times) >= FLUSH:
            self._flush()
        if kill_best is not None:
            self._outcomes.kill(idx, kill_best)

    def _flush(self) -> None:
        """Move the outcome rows and the event log's lists into numpy (every job that ends
        logged an event, so one check on the log covers both)."""
        self._outcomes.flush()
        self.events.flush()

    def _schedule_next(self, job: Job, attained: float) -> None:
        """Schedule the job's next milestone; ``attained`` is its service now."""
        idx = job.idx
        target = self._duration_s[idx]
        if self._eval_events:
            watch = self._watches[idx]
            if watch.next_eval < len(watch.targets):
                target = min(target, watch.targets[watch.next_eval])
        kill = self._kill_s[idx]
        if kill < target:
            target = kill
        code = MILESTONE
        if self._next_change_s is not None:
            change = self._next_change_s(job)
            if change is not None and attained < change <= target:
                target, code = change, RANK
        when = job.seg_start + job.overhead_left + (target - job.attained_at_seg)  # >= now
        engine = self.engine
        heappush(engine.heap, (when, DEPART, next(engine.seq), (job, job.version, target, code)))

    def _close_segment(self, job: Job, now: float) -> None:
        """Bring the job's accounting up to ``now`` and start a new running segment there."""
        elapsed = now - job.seg_start
        spent_overhead = min(elapsed, job.overhead_left)
        job.gpu_s_overhead += spent_overhead * job.gpus
        job.attained_at_seg = min(self._duration_s[job.idx], job.attained_at_seg + elapsed - spent_overhead)
        job.overhead_left -= spent_overhead
        job.seg_start = now
        job.attained_s = job.attained_at_seg

    # -- transitions ---------------------------------------------------------------------
    def _start(self, job: Job, now: float) -> None:
        job_id = job.job_id
        del self.waiting[job_id]
        self.waiting_gpus -= job.gpus
        self.running[job_id] = job
        self.used_gpus += job.gpus
        if self.used_gpus > self.total_gpus:
            raise SimulationInvariantError(
                f"t={now}: starting job {job_id} allocates {self.used_gpus} GPUs of {self.total_gpus}"
            )
        if job.first_start_s is None:
            job.first_start_s = now
        job.seg_start = now
        if job.n_preempt:  # (a job that never ran, or has just run, has no restore left)
            job.overhead_left = self.config.preempt_overhead_s
            if self.config.min_run_s > 0.0:
                job.protected_until = now + job.overhead_left + self.config.min_run_s
                self.engine.schedule(job.protected_until, DEPART, (job, job.version, 0.0, TIMER))
        job.running = True
        if self._on_start is not None:
            self._on_start(job, now)
        self._log_time(now)
        self._log_kind(STARTED)
        self._log_id(job_id)
        if self._plain_next:  # ``_schedule_next`` inlined for a job with no eval or rank milestone
            idx = job.idx
            target, kill = self._duration_s[idx], self._kill_s[idx]
            code = KILL if kill <= target else MILESTONE
            if kill < target:
                target = kill
            when = now + job.overhead_left + (target - job.attained_at_seg)
            engine = self.engine
            heappush(engine.heap, (when, DEPART, next(engine.seq), (job, job.version, target, code)))
        else:
            self._schedule_next(job, job.attained_at_seg)

    def _release(self, job: Job, now: float) -> None:
        """Take the job's GPUs back; its accounting is already closed at ``now``."""
        job.version += 1
        job.overhead_left = 0.0
        job.running = False
        del self.running[job.job_id]
        self.used_gpus -= job.gpus
        if self._on_stop is not None:
            self._on_stop(job, now)

    def _preempt(self, job: Job, now: float) -> None:
        self._close_segment(job, now)
        self._release(job, now)
        job.n_preempt += 1
        self._enqueue(job, now)
        self.events.add(now, PREEMPTED, job.job_id)

    # -- results -------------------------------------------------------------------------
    def _result(self) -> SimResult:
        n_jobs = len(self.table)
        if self.running or self.waiting or self._outcomes.n_ended() != n_jobs:
            raise SimulationInvariantError(
                f"t={self.engine.now}: run ended with {len(self.running)} running, "
                f"{len(self.waiting)} waiting, {self._outcomes.n_ended()}/{n_jobs} jobs done"
            )
        outcomes = self._outcomes.outcome_table()
        columns = outcomes.columns
        spent = float(np.sum(columns["gpu_s_useful"] + columns["gpu_s_overhead"]))
        if "gpu_s_eval" in columns:
            spent += float(np.sum(columns["gpu_s_eval"]))
        if abs(spent - self.busy_gpu_s) > 1e-6 * max(1.0, self.busy_gpu_s):
            raise SimulationInvariantError(
                f"GPU-time not conserved: jobs account for {spent} GPU-s, "
                f"the cluster was busy {self.busy_gpu_s}"
            )
        makespan = float(columns["end_s"].max() - columns["arrival_s"].min()) if n_jobs else 0.0
        policy = "oracle" if self.config.oracle else self.scheduler.name
        return SimResult(policy, self.seed, self.total_gpus, makespan, outcomes, self.events.digest())


def simulate(workload: Workload, scheduler: Scheduler, config: SimConfig | None = None) -> SimResult:
    """Run ``scheduler`` over ``workload`` and return one record per job."""
    return ClusterSim(workload, scheduler, config).run()
