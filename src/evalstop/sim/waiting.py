"""Waiting jobs of a static-rank policy: one heap per job width, keyed on the rank.

An allocation pass over a rank-ordered list starts a job when it fits in the GPUs left, and a
job skipped for being too wide is never started later in that pass (the GPUs left only shrink).
So the pass is "repeatedly take the best-ranked job no wider than the GPUs left", which is the
best head among the heaps of widths <= GPUs left: O(number of widths + log n) per job started,
however long the queue. Entries are removed only by ``pop`` or ``clear``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Key = tuple[Any, ...]


class WidthHeaps(Generic[T]):
    __slots__ = ("_heaps", "_size", "_widths")

    def __init__(self) -> None:
        #: width -> heap of the rank key's items followed by the job: a flat tuple compares in
        #: one pass (the key is unique, so the comparison never reaches the job).
        self._heaps: dict[int, list[tuple[Any, ...]]] = {}
        self._widths: list[int] = []  # ascending widths with a heap (possibly empty)
        self._size = 0

    def push_all(self, items: list[T], width: Callable[[T], int], key: Callable[[T], Key]) -> None:
        """Add every item, ``width(item)`` GPUs wide with rank ``key(item)`` (a tuple, unique:
        items are never compared)."""
        heaps, push = self._heaps, heapq.heappush
        for item in items:
            w = width(item)
            heap = heaps.get(w)
            if heap is None:
                heap = heaps[w] = []
                self._widths.append(w)
                self._widths.sort()
            push(heap, (*key(item), item))
        self._size += len(items)

    def best(self, max_width: int | None = None) -> tuple[Any, int] | None:
        """(entry, width) of the best-ranked entry no wider than ``max_width`` (None: any width).
        The entry is the key followed by the item: it compares with another key as the key does."""
        found: tuple[Any, int] | None = None
        heaps = self._heaps
        for width in self._widths:
            if max_width is not None and width > max_width:
                break
            heap = heaps[width]
            if heap and (found is None or heap[0] < found[0]):
                found = (heap[0], width)
        return found

    def take(self, free: int, backfill: bool) -> list[T]:
        """Pop, in rank order, the waiting jobs an allocation pass starts in ``free`` GPUs:
        repeatedly the best-ranked job no wider than the GPUs left (``backfill``), or the
        best-ranked job if it fits (strict). ``best`` and ``pop`` in one loop: the hot path of
        a non-preemptive policy under a long queue."""
        heaps, widths = self._heaps, self._widths
        taken: list[T] = []
        while free > 0:
            head: tuple[Any, ...] | None = None
            head_width = 0
            for width in widths:
                if backfill and width > free:
                    break
                heap = heaps[width]
                if heap and (head is None or heap[0] < head):
                    head, head_width = heap[0], width
            if head is None or head_width > free:
                break
            free -= head_width
            taken.append(heapq.heappop(heaps[head_width])[-1])
            self._size -= 1
        return taken

    def pop(self, width: int) -> T:
        """Remove and return the best entry of ``width`` (as found by ``best``)."""
        item: T = heapq.heappop(self._heaps[width])[-1]
        self._size -= 1
        return item

    def clear(self) -> None:
        if self._size:
            for heap in self._heaps.values():
                heap.clear()
            self._size = 0

    def __len__(self) -> int:
        return self._size
