"""Allocation passes: who holds the GPUs after an instant where the waiting jobs do not all fit.

``AllocationPasses`` is the part of ``ClusterSim`` that decides it (a mixin: the simulator's
state is its own), for every kind of policy: a static-rank policy (``Scheduler.static_rank``)
through the pure decisions below, any other through ``Scheduler.order`` over the active jobs.
A start or a preemption is the simulator's (``_start``, ``_preempt``).

The static passes give what a scan of every active job in rank order gives ("start, or keep, each job
that fits in the GPUs not yet handed out; without backfilling stop at the first that does
not"), without ranking the whole queue: waiting jobs sit in :class:`WidthHeaps`, so a pass costs
the jobs it hands GPUs to, plus, for a preemptive policy, the running jobs (at most one per GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from ..schedulers import JobView, Scheduler
from ._job import DEPART, TIMER, Job
from .engine import Engine
from .waiting import WidthHeaps

if TYPE_CHECKING:
    from ._config import SimConfig

T = TypeVar("T")
gpus_of = attrgetter("gpus")


def merge_pass(
    running: list[tuple[Any, int, T]], queue: WidthHeaps[T], total: int, free: int, backfill: bool
) -> tuple[list[T], list[T]]:
    """Merge the running jobs, as (rank key, width, job) sorted by key, with the waiting heaps.

    Returns (kept, started): the running jobs that keep their GPUs and the waiting jobs to start
    (popped from ``queue``), each in rank order. ``free`` is the GPUs no running job holds.
    """
    capacity, i, n = total, 0, len(running)
    kept: list[T] = []
    started: list[T] = []
    started_gpus = 0
    found = queue.best(capacity if backfill else None)
    while capacity > 0:
        if backfill:
            while i < n and running[i][1] > capacity:
                i += 1
            if found is not None and found[1] > capacity:
                found = queue.best(capacity)
            if found is None and started_gpus <= free:
                # No waiting job fits any more and every running job left fits: keep them all.
                kept.extend(job for _, _, job in running[i:])
                return kept, started
        if i < n and (found is None or running[i][0] < found[0]):
            width = running[i][1]
            if width > capacity:
                break  # strict: the best job that does not fit blocks the rest
            kept.append(running[i][2])
            i += 1
        elif found is not None and found[1] <= capacity:
            width = found[1]
            started.append(queue.pop(width))
            started_gpus += width
            found = queue.best(capacity - width if backfill else None)
        else:
            break
        capacity -= width
    return kept, started


class AllocationPasses:
    """``ClusterSim``'s allocation passes (the attributes below are the simulator's)."""

    config: SimConfig
    scheduler: Scheduler
    total_gpus: int
    used_gpus: int
    running: dict[int, Job]
    waiting: dict[int, Job]
    _static: bool
    _queue: WidthHeaps[Job]
    _unranked: list[Job]
    _rank_key: Callable[[JobView], tuple[Any, ...]]
    engine: Engine
    waiting_gpus: int

    def _start(self, job: Job, now: float) -> None:
        raise NotImplementedError  # the simulator's

    def _preempt(self, job: Job, now: float) -> None:
        raise NotImplementedError  # the simulator's

    def _enqueue(self, job: Job, now: float) -> None:
        """A preempted job waits again (an arriving one is enqueued inline in the loop)."""
        self.waiting[job.job_id] = job
        self.waiting_gpus += job.gpus
        if self._static:
            self._unranked.append(job)
        else:
            self._wake_timer(job, now)

    def _wake_timer(self, job: Job, now: float) -> None:
        wake = self.scheduler.wake_at_s(job, now)
        if wake is not None:
            # A waiting job's rank changes at ``wake`` (starvation guard): an event there, stale
            # (ignored) if the job has run and stopped again by then (its version moved on).
            self.engine.schedule(max(wake, now), DEPART, (job, job.version, 0.0, TIMER))

    def _reschedule(self, now: float) -> None:
        """One allocation pass of a preemptive or dynamic-rank policy when the waiting jobs do
        not all fit (the loop itself starts them all when they do, and makes the pass of a
        non-preemptive static-rank policy: it only starts jobs)."""
        if self._unranked:
            self._queue.push_all(self._unranked, gpus_of, self._rank_key)
            self._unranked.clear()
        for job in self.running.values():
            job.attained_s = job.attained_at(now)
        if self._static:
            self._allocate_preemptive_static(now)
            return
        active: list[JobView] = [*self.running.values(), *self.waiting.values()]
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

    def _allocate_preemptive_static(self, now: float) -> None:
        key = self._rank_key
        protected = self._protected(now)
        ranked = sorted(
            [(key(job), job.gpus, job) for i, job in self.running.items() if i not in protected]
        )
        total = self.total_gpus - sum(job.gpus for job in protected.values())
        free = self.total_gpus - self.used_gpus
        kept, started = merge_pass(ranked, self._queue, total, free, self.scheduler.backfill)
        if len(kept) + len(protected) < len(self.running):
            keep = {job.job_id for job in kept} | set(protected)
            for job_id in [j for j in self.running if j not in keep]:
                self._preempt(self.running[job_id], now)
        for job in started:
            self._start(job, now)

    def _protected(self, now: float) -> dict[int, Job]:
        """Running jobs still inside their minimum run quantum: they keep their GPUs."""
        if self.config.min_run_s <= 0.0:
            return {}
        return {i: job for i, job in self.running.items() if job.protected_until > now}

    def _allocate_preemptive(self, ranked: list[JobView], now: float) -> None:
        protected = self._protected(now)
        capacity = self.total_gpus - sum(job.gpus for job in protected.values())
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
