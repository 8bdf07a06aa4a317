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
    __slots__ = ("_heap", "_seq", "now")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self.now = 0.0

    def schedule(self, time: float, priority: int, event: Any) -> None:
        if not time >= self.now or math.isinf(time):
            raise ValueError(f"cannot schedule {event!r} at t={time!r}: now is {self.now!r}")
        heapq.heappush(self._heap, (time, priority, next(self._seq), event))

    def pop(self) -> Any | None:
        """Advance the clock to the next event and return it (None when empty)."""
        if not self._heap:
            return None
        time, _, _, event = heapq.heappop(self._heap)
        self.now = time
        return event

    def pop_due(self, limit: float) -> Any | None:
        """Pop the next event if it is due by ``limit``, handling it at the current instant
        (the clock does not move); None otherwise."""
        if self._heap and self._heap[0][0] <= limit:
            return heapq.heappop(self._heap)[3]
        return None

    def peek_time(self) -> float | None:
        """Time of the next event without popping it (None when empty)."""
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
