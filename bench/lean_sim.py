"""A lean reference event loop: the yardstick ``sim_speed.py`` times evalstop against.

A heap of completions and a sorted waiting list per job width; gang allocation, no preemption.
At each instant every completion is handled first, then every arrival, then one allocation pass
in rank order: a job starts if it fits in the free GPUs; without backfill the first job that
does not fit blocks the rest. These are the simulator's rules for a non-preemptive policy, so
the start times must match evalstop's exactly. (Per-width lists make a backfill pass cost the
jobs it starts, not the queue it skips: the yardstick is as lean as the algorithm allows.)
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Callable, Sequence

Key = Callable[[int], tuple[float, ...]]


def lean_starts(
    submit_s: Sequence[float],
    gpus: Sequence[int],
    duration_s: Sequence[float],
    total_gpus: int,
    key: Key,
    backfill: bool,
) -> list[float]:
    """Start time of every job (index = job) under the ranking ``key`` (smaller first)."""
    n = len(submit_s)
    arrivals = sorted(range(n), key=submit_s.__getitem__)
    starts = [0.0] * n
    running: list[tuple[float, int]] = []  # heap of (end time, job)
    waiting: dict[int, list[tuple[tuple[float, ...], int]]] = {}  # width -> sorted (key, job)
    free, nxt = total_gpus, 0
    while nxt < n or running:
        now = running[0][0] if running else submit_s[arrivals[nxt]]
        if nxt < n and submit_s[arrivals[nxt]] < now:
            now = submit_s[arrivals[nxt]]
        while running and running[0][0] == now:
            free += gpus[heapq.heappop(running)[1]]
        while nxt < n and submit_s[arrivals[nxt]] == now:
            job = arrivals[nxt]
            insort(waiting.setdefault(gpus[job], []), (key(job), job))
            nxt += 1
        while free > 0:
            # The best-ranked waiting job no wider than the free GPUs (any width, strictly):
            # a rank-order scan would start exactly that one next.
            heads = [w[0] for width, w in waiting.items() if w and (width <= free or not backfill)]
            if not heads:
                break
            _, job = min(heads)
            if gpus[job] > free:
                break
            waiting[gpus[job]].pop(0)
            free -= gpus[job]
            starts[job] = now
            heapq.heappush(running, (now + duration_s[job], job))
    return starts
