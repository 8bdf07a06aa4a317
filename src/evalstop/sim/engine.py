"""A generic discrete-event kernel: a heap of (time, priority, seq, event).

It knows nothing about GPUs or jobs. Ties in time break on ``priority`` (lower first), then
on insertion order, so a run is a pure function of what is scheduled.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any


class Engine:
    __slots__ = ("heap", "now", "seq")

    def __init__(self) -> None:
        #: (time, priority, seq, event) entries. A caller may peek at ``heap[0]`` and, on a hot
        #: path, ``heapq.heappop`` it itself (then it sets ``now``) or push an entry itself with
        #: the next ``seq`` (then it owns the check ``schedule`` makes: not before ``now``).
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = itertools.count()
        self.now = 0.0

    def schedule(self, time: float, priority: int, event: Any) -> None:
        if not time >= self.now or math.isinf(time):
            raise ValueError(f"cannot schedule {event!r} at t={time!r}: now is {self.now!r}")
        heapq.heappush(self.heap, (time, priority, next(self.seq), event))

    def pop(self) -> Any | None:
        """Advance the clock to the next event and return it (None when empty)."""
        if not self.heap:
            return None
        time, _, _, event = heapq.heappop(self.heap)
        self.now = time
        return event

    def __len__(self) -> int:
        return len(self.heap)
