"""Allocation passes of static-rank policies (``Scheduler.static_rank``), as pure decisions.

Both passes give what a scan of every active job in rank order gives ("start, or keep, each job
that fits in the GPUs not yet handed out; without backfilling stop at the first that does
not"), without ranking the whole queue: waiting jobs sit in :class:`WidthHeaps`, so a pass costs
the jobs it hands GPUs to, plus, for a preemptive policy, the running jobs (at most one per GPU).
"""

from __future__ import annotations

from typing import Any, TypeVar

from .waiting import WidthHeaps

T = TypeVar("T")


def fill_free(queue: WidthHeaps[T], free: int, backfill: bool) -> list[T]:
    """Waiting jobs to start in ``free`` GPUs, in rank order (popped from ``queue``)."""
    return queue.take(free, backfill)


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
