"""The GPU-cluster simulation: jobs arrive, a scheduler ranks them, GPUs are gang-allocated.

Time is exact (float seconds, no ticks). A job progresses only while it holds its GPUs; after a
preemption it first pays ``preempt_overhead_s`` of GPU time to restore. Progress milestones
(evals, a planned kill, completion, a scheduler's rank change) are events at the exact time the
job's attained service reaches them.

Cost: each job costs a constant number of events, each O(log active jobs) on the heap, plus one
``Scheduler.order`` call over the active jobs whenever demand exceeds the cluster. Arrivals enter
the heap one at a time, in (arrival time, job order), and a job's state exists only from its
arrival to its end, so memory grows with the jobs in the system, not with the workload.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .._gc import cyclic_gc_paused
from .._validation import check_choice, check_float
from ..detectors import Decision, Monitor, Verdict
from ..schedulers import JobView, Scheduler
from ..workloads import JobSpec, JobTruth, Workload
from ._inputs import ARRIVED, COMPLETED, KILLED, PREEMPTED, STARTED, EventLog, check_jobs, in_arrival_order
from .allocation import fill_free, merge_pass
from .engine import Engine
from .outcome import JobOutcome, SimResult
from .waiting import WidthHeaps

DEPART, ARRIVE = 0, 1  # same-time priority: free GPUs before handing them out
#: Events due within this relative distance of an instant (seconds below 1 s) happen at it:
#: about 5,000 times float64's relative spacing (2.2e-16), so round-off from the few operations
#: behind an event time is covered, and small enough that the GPU-time accounting stays exact
#: to 1e-9 relative (the simulator's invariant tests hold it to that).
TIME_TOL_S = 1e-12


class SimulationInvariantError(RuntimeError):
    """A broken simulator invariant: a bug, never bad input."""


@dataclass(frozen=True)
class SimConfig:
    preempt_overhead_s: float = 120.0
    #: "fast": the kill point is computed from each job's own eval sequence at arrival (valid
    #: because a stopping rule only reads that sequence); "events": one event per eval.
    eval_path: str = "fast"
    #: The oracle stops each hacking job at its best true checkpoint (upper bound, sim only).
    oracle: bool = False
    #: Minimum run quantum: a resumed job cannot be preempted again until it has finished its
    #: restore and then run this many seconds (0: no quantum; see docs/model.md).
    min_run_s: float = 0.0

    def __post_init__(self) -> None:
        check_float("SimConfig", "preempt_overhead_s", self.preempt_overhead_s, low=0.0)
        check_float("SimConfig", "min_run_s", self.min_run_s, low=0.0)
        check_choice("SimConfig", "eval_path", self.eval_path, ("fast", "events"))


class _Job:
    """Simulator-side state of one job. ``view`` is all the scheduler ever sees."""

    __slots__ = (
        "attained_at_seg", "done", "duration_s", "first_start_s", "gpu_s_overhead", "kill_at",
        "kill_verdict", "monitor", "n_preempt", "next_eval", "overhead_left", "protected_until",
        "rank_milestone", "seg_start", "spec", "target_s", "truth", "version", "view",
    )

    def __init__(self, spec: JobSpec, truth: JobTruth) -> None:
        self.spec, self.truth = spec, truth
        self.view = JobView(spec.job_id, spec.tenant, spec.kind, spec.gpus, spec.arrival_s, spec.budget_s)
        self.duration_s = truth.duration_s
        self.seg_start = 0.0
        self.attained_at_seg = 0.0
        self.overhead_left = 0.0
        self.gpu_s_overhead = 0.0
        self.first_start_s: float | None = None
        self.n_preempt = 0
        self.next_eval = 0
        self.kill_at: int | None = None  # eval index of the planned kill (fast path)
        self.kill_verdict: Verdict | None = None
        self.monitor: Monitor | None = None  # the stopping rule watching the job (events path)
        self.version = 0
        self.target_s = 0.0
        self.rank_milestone = False  # the scheduled milestone is a rank change (next_change_s)
        self.protected_until = 0.0  # no preemption before this time (minimum run quantum)
        self.done = False

    def attained_at(self, now: float) -> float:
        ran = now - self.seg_start - self.overhead_left
        return self.attained_at_seg + ran if ran > 0.0 else self.attained_at_seg

    def eval_target_s(self, index: int) -> float:
        progress = self.spec.evals[index].progress
        return self.duration_s * (1.0 if progress is None else progress)


class ClusterSim:
    def __init__(self, workload: Workload, scheduler: Scheduler, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.scheduler = scheduler
        self.total_gpus = workload.config.total_gpus
        check_jobs(workload)
        self.seed = workload.seed
        self.workload = workload
        self.engine = Engine()
        self.running: dict[int, _Job] = {}
        self.waiting: dict[int, _Job] = {}
        self.used_gpus = 0
        self.waiting_gpus = 0
        self.busy_gpu_s = 0.0
        self._last_t = 0.0
        self._plan_kills = self.config.eval_path == "fast" or self.config.oracle
        self._eval_events = self.config.eval_path == "events" and not self.config.oracle
        self.events = EventLog()
        self.outcomes: dict[int, JobOutcome] = {}
        #: Static-rank policies (see ``Scheduler.static_rank``): waiting jobs in width heaps.
        self._static = scheduler.static_rank
        self._queue: WidthHeaps[_Job] = WidthHeaps()

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
        arrivals = in_arrival_order(self.workload)
        self._schedule_arrival(arrivals)
        while (event := self.engine.pop()) is not None:
            now = self.engine.now
            self._account(now)
            changed = self._handle(event, arrivals, now)
            # Every event of this instant first (departures sort before arrivals), then one
            # allocation: a job due to finish now is never preempted now. "Now" spans float
            # round-off (TIME_TOL_S): a job due at 0.1 + 0.2 finishes at an arrival at 0.3.
            due_by = now + TIME_TOL_S * max(1.0, abs(now))
            while (event := self.engine.pop_due(due_by)) is not None:
                changed |= self._handle(event, arrivals, now)
            # Only stale timers (of preempted jobs) fired: under a static-rank policy the
            # allocation cannot change (waiting ranks are fixed, running ones only improve).
            if changed or not self._static:
                self._reschedule(now)

    def _handle(self, event: Any, arrivals: Iterator[tuple[JobSpec, JobTruth]], now: float) -> bool:
        """Handle one event; False if it was a stale timer (nothing changed)."""
        kind, job, version = event
        if kind == "arrive":
            self._schedule_arrival(arrivals)
            self._arrive(job, now)
            return True
        if version != job.version:
            return False
        if kind == "milestone":
            self._milestone(job, now)
        return True  # a milestone, the end of a minimum run quantum, or a waiting job's wake-up

    def _schedule_arrival(self, arrivals: Iterator[tuple[JobSpec, JobTruth]]) -> None:
        """Put the next arrival on the heap. Only arrivals share its priority and they come in
        (time, job order), so the pop order is that of scheduling every arrival up front."""
        pair = next(arrivals, None)
        if pair is not None:
            job = _Job(*pair)
            self.engine.schedule(job.spec.arrival_s, ARRIVE, ("arrive", job, 0))

    def _account(self, now: float) -> None:
        self.busy_gpu_s += self.used_gpus * (now - self._last_t)
        self._last_t = now

    def _arrive(self, job: _Job, now: float) -> None:
        self.events.add(now, ARRIVED, job.spec.job_id)
        self.scheduler.on_job_add(job.view, now)
        if self._plan_kills:
            job.kill_verdict = self._plan_kill(job)
            job.kill_at = None if job.kill_verdict is None else job.kill_verdict.stop_index
        else:
            job.monitor = self.scheduler.monitor(job.view)
        self._enqueue(job, now)

    def _plan_kill(self, job: _Job) -> Verdict | None:
        """Fast path: fold the job's whole eval sequence into its monitor once, at arrival."""
        if self.config.oracle:
            return _oracle_verdict(job) if job.truth.hacking else None
        monitor = self.scheduler.monitor(job.view)
        if monitor is None:
            return None
        return monitor.verdict if monitor.fold(job.spec.evals) else None

    # -- milestones ----------------------------------------------------------------------
    def _milestone(self, job: _Job, now: float) -> None:
        """The job's attained service reached its next target: eval, kill, completion or rank change.

        Its attained service is that target exactly (float round-off in now - seg_start must not
        leave it a hair short). An eval milestone that does not end the job leaves its running
        segment open, so the next milestone is timed from the segment's start, as on the fast
        path where no eval event lies between them: both paths compute the same times, bit for
        bit. A rank change, which both paths share, starts a new segment."""
        if job.rank_milestone:
            self._close_segment(job, now)
            job.attained_at_seg = job.target_s
        attained = job.view.attained_s = job.target_s
        evals = job.spec.evals
        if self._eval_events:
            monitor = job.monitor
            while job.next_eval < len(evals) and job.eval_target_s(job.next_eval) <= attained:
                job.next_eval += 1
                if monitor is None:
                    continue
                verdict = monitor.observe(evals[job.next_eval - 1])
                if monitor.fired_now:
                    self._end_at_milestone(job, now, verdict)
                    return
        if job.kill_at is not None and job.eval_target_s(job.kill_at) <= attained:
            self._end_at_milestone(job, now, job.kill_verdict)
        elif attained >= job.duration_s:
            self._end_at_milestone(job, now, None)
        else:
            self._schedule_next(job, attained)

    def _end_at_milestone(self, job: _Job, now: float, verdict: Verdict | None) -> None:
        target = job.target_s
        self._close_segment(job, now)
        job.attained_at_seg = job.view.attained_s = target
        self._end(job, now, verdict)

    def _schedule_next(self, job: _Job, attained: float) -> None:
        """Schedule the job's next milestone; ``attained`` is its service now."""
        target = job.duration_s
        if self._eval_events and job.next_eval < len(job.spec.evals):
            target = min(target, job.eval_target_s(job.next_eval))
        if job.kill_at is not None:
            target = min(target, job.eval_target_s(job.kill_at))
        change = self.scheduler.next_change_s(job.view)
        job.rank_milestone = change is not None and attained < change <= target
        if change is not None and job.rank_milestone:
            target = change
        job.target_s = target
        when = job.seg_start + job.overhead_left + (target - job.attained_at_seg)
        self.engine.schedule(when, DEPART, ("milestone", job, job.version))

    def _close_segment(self, job: _Job, now: float) -> None:
        """Bring the job's accounting up to ``now`` and start a new running segment there."""
        elapsed = now - job.seg_start
        spent_overhead = min(elapsed, job.overhead_left)
        job.gpu_s_overhead += spent_overhead * job.spec.gpus
        job.attained_at_seg = min(job.duration_s, job.attained_at_seg + elapsed - spent_overhead)
        job.overhead_left -= spent_overhead
        job.seg_start = now
        job.view.attained_s = job.attained_at_seg

    # -- allocation ----------------------------------------------------------------------
    def _enqueue(self, job: _Job, now: float) -> None:
        self.waiting[job.spec.job_id] = job
        self.waiting_gpus += job.spec.gpus
        if self._static:
            self._queue.push(job.spec.gpus, self.scheduler.rank_key(job.view), job)
            return
        wake = self.scheduler.wake_at_s(job.view, now)
        if wake is not None:
            # A waiting job's rank changes at ``wake`` (starvation guard): an event there, stale
            # (ignored) if the job has run and stopped again by then (its version moved on).
            self.engine.schedule(max(wake, now), DEPART, ("wake", job, job.version))

    def _reschedule(self, now: float) -> None:
        if not self.waiting:
            return
        if self.used_gpus + self.waiting_gpus <= self.total_gpus:
            self._queue.clear()
            for job in list(self.waiting.values()):
                self._start(job, now)
            return
        if self._static and not self.scheduler.preemptive:
            self._allocate_free_static(now)
            return
        for job in self.running.values():
            job.view.attained_s = job.attained_at(now)
        if self._static:
            self._allocate_preemptive_static(now)
            return
        active = [j.view for j in self.running.values()] + [j.view for j in self.waiting.values()]
        ranked = self.scheduler.order(active, now)
        if self.scheduler.preemptive:
            self._allocate_preemptive(ranked, now)
        else:
            self._allocate_free(ranked, now)

    def _allocate_free(self, ranked: list[JobView], now: float) -> None:
        """Start waiting jobs in rank order wherever they fit in the free GPUs; without
        backfilling, the first waiting job that does not fit blocks the ones behind it."""
        free = self.total_gpus - self.used_gpus
        for view in ranked:
            job = self.waiting.get(view.job_id)
            if job is None:
                continue
            if view.gpus > free:
                if not self.scheduler.backfill:
                    return
                continue
            free -= view.gpus
            self._start(job, now)

    def _allocate_free_static(self, now: float) -> None:
        free = self.total_gpus - self.used_gpus
        for job in fill_free(self._queue, free, self.scheduler.backfill):
            self._start(job, now)

    def _allocate_preemptive_static(self, now: float) -> None:
        key = self.scheduler.rank_key
        protected = self._protected(now)
        ranked = sorted(
            [(key(job.view), job.spec.gpus, job) for i, job in self.running.items() if i not in protected]
        )
        total = self.total_gpus - sum(job.spec.gpus for job in protected.values())
        free = self.total_gpus - self.used_gpus
        kept, started = merge_pass(ranked, self._queue, total, free, self.scheduler.backfill)
        if len(kept) + len(protected) < len(self.running):
            keep = {job.spec.job_id for job in kept} | set(protected)
            for job_id in [j for j in self.running if j not in keep]:
                self._preempt(self.running[job_id], now)
        for job in started:
            self._start(job, now)

    def _protected(self, now: float) -> dict[int, _Job]:
        """Running jobs still inside their minimum run quantum: they keep their GPUs."""
        if self.config.min_run_s <= 0.0:
            return {}
        return {i: job for i, job in self.running.items() if job.protected_until > now}

    def _allocate_preemptive(self, ranked: list[JobView], now: float) -> None:
        protected = self._protected(now)
        capacity = self.total_gpus - sum(job.spec.gpus for job in protected.values())
        chosen: list[int] = list(protected)
        for view in ranked:
            if view.job_id in protected:
                continue
            if view.gpus <= capacity:
                chosen.append(view.job_id)
                capacity -= view.gpus
            elif not self.scheduler.backfill:
                break  # strict: the best job that does not fit blocks the rest
        keep = set(chosen)
        for job_id in [i for i in self.running if i not in keep]:
            self._preempt(self.running[job_id], now)
        for job_id in chosen:
            job = self.waiting.get(job_id)
            if job is not None:
                self._start(job, now)

    def _start(self, job: _Job, now: float) -> None:
        job_id = job.spec.job_id
        del self.waiting[job_id]
        self.waiting_gpus -= job.spec.gpus
        self.running[job_id] = job
        self.used_gpus += job.spec.gpus
        if self.used_gpus > self.total_gpus:
            raise SimulationInvariantError(
                f"t={now}: starting job {job_id} allocates {self.used_gpus} GPUs of {self.total_gpus}"
            )
        if job.first_start_s is None:
            job.first_start_s = now
        job.seg_start = now
        job.overhead_left = self.config.preempt_overhead_s if job.n_preempt else 0.0
        if job.n_preempt and self.config.min_run_s > 0.0:
            job.protected_until = now + job.overhead_left + self.config.min_run_s
            self.engine.schedule(job.protected_until, DEPART, ("quantum", job, job.version))
        job.view.running = True
        self.scheduler.on_start(job.view, now)
        self.events.add(now, STARTED, job_id)
        self._schedule_next(job, job.attained_at_seg)

    def _release(self, job: _Job, now: float) -> None:
        """Take the job's GPUs back; its accounting is already closed at ``now``."""
        job.version += 1
        job.overhead_left = 0.0
        job.view.running = False
        del self.running[job.spec.job_id]
        self.used_gpus -= job.spec.gpus
        self.scheduler.on_stop(job.view, now)

    def _preempt(self, job: _Job, now: float) -> None:
        self._close_segment(job, now)
        self._release(job, now)
        job.n_preempt += 1
        self._enqueue(job, now)
        self.events.add(now, PREEMPTED, job.spec.job_id)

    def _end(self, job: _Job, now: float, verdict: Verdict | None) -> None:
        """Kill or complete the job at one of its milestones (whose segment is closed at ``now``)."""
        self._release(job, now)
        job.done = True
        self.scheduler.on_job_end(job.view, now)
        self.events.add(now, KILLED if verdict is not None else COMPLETED, job.spec.job_id)
        self.outcomes[job.spec.job_id] = _outcome(job, now, verdict)

    # -- results -------------------------------------------------------------------------
    def _result(self) -> SimResult:
        specs = self.workload.jobs
        if self.running or self.waiting or len(self.outcomes) != len(specs):
            raise SimulationInvariantError(
                f"t={self.engine.now}: run ended with {len(self.running)} running, "
                f"{len(self.waiting)} waiting, {len(self.outcomes)}/{len(specs)} jobs done"
            )
        outcomes = tuple(self.outcomes[spec.job_id] for spec in specs)
        spent = sum(o.gpu_s_useful + o.gpu_s_overhead for o in outcomes)
        if abs(spent - self.busy_gpu_s) > 1e-6 * max(1.0, self.busy_gpu_s):
            raise SimulationInvariantError(
                f"GPU-time not conserved: jobs account for {spent} GPU-s, "
                f"the cluster was busy {self.busy_gpu_s}"
            )
        first = min(o.arrival_s for o in outcomes)
        makespan = max(o.end_s for o in outcomes) - first
        policy = "oracle" if self.config.oracle else self.scheduler.name
        return SimResult(policy, self.seed, self.total_gpus, makespan, outcomes, self.events.digest())


def _oracle_verdict(job: _Job) -> Verdict:
    """Stop at the eval holding the best true checkpoint, which the oracle can see."""
    true_q = job.truth.true_at_evals
    best = max(range(len(true_q)), key=true_q.__getitem__)
    step, score = job.spec.evals[best].step, job.spec.evals[best].score
    return Verdict(Decision.STOP, "oracle: true peak", best, step, best, step, score)


def _outcome(job: _Job, now: float, verdict: Verdict | None) -> JobOutcome:
    truth, spec = job.truth, job.spec
    progress = job.attained_at_seg / job.duration_s if job.duration_s > 0 else 1.0
    killed = verdict is not None
    delivered = truth.true_final
    if verdict is not None and verdict.best_index is not None:
        delivered = truth.true_at_evals[verdict.best_index]
    after_peak = max(0.0, progress - truth.peak_progress) if truth.hacking else 0.0
    assert job.first_start_s is not None
    return JobOutcome(
        job_id=spec.job_id, tenant=spec.tenant, kind=spec.kind, gpus=spec.gpus, hacking=truth.hacking,
        arrival_s=spec.arrival_s, start_s=job.first_start_s, end_s=now, killed=killed,
        stop_progress=progress if killed else None, end_progress=progress, n_preemptions=job.n_preempt,
        gpu_s_useful=job.attained_at_seg * spec.gpus, gpu_s_overhead=job.gpu_s_overhead,
        gpu_s_after_peak=after_peak * job.duration_s * spec.gpus, true_peak=truth.true_peak,
        true_delivered=delivered,
    )


def simulate(workload: Workload, scheduler: Scheduler, config: SimConfig | None = None) -> SimResult:
    """Run ``scheduler`` over ``workload`` and return one record per job."""
    return ClusterSim(workload, scheduler, config).run()
