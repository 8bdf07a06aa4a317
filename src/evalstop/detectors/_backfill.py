"""Backfill at the stop: evaluate the checkpoints a sparse cadence skipped next to the best one.

A sparse cadence skips checkpoints, so the best one it saw may not be the best there was. At a
stop, the checkpoints within ``width`` opportunities of the best eval (before it, and after it up
to the stop) that were not evaluated are evaluated now, and the best of them and the best eval
is delivered. ``Neighbours`` keeps what that needs as the evals go by: O(width) values per job,
whatever the length of the history.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

#: Checkpoints on each side of the best one that a stop backfills.
WIDTH = 2


@dataclass(frozen=True, slots=True)
class Slot:
    """One eval opportunity: its step, the score an eval there gives, whether it was run."""

    step: int
    score: float
    used: bool


class Neighbours:
    """The opportunities around the running best: up to ``width`` before it and after it."""

    __slots__ = ("after", "before", "best_step", "recent", "width")

    def __init__(self, width: int = WIDTH) -> None:
        self.width = width
        self.recent: deque[Slot] = deque(maxlen=width)
        self.before: tuple[Slot, ...] = ()
        self.after: list[Slot] = []
        self.best_step: int | None = None

    def add(self, slot: Slot, best_step: int | None) -> None:
        """Record the opportunity ``slot`` (in step order), with the best eval's step once the
        eval at it, if run, has been folded in."""
        if best_step is not None and best_step == slot.step and best_step != self.best_step:
            self.best_step, self.before, self.after = best_step, tuple(self.recent), []
        elif self.best_step is not None and len(self.after) < self.width:
            self.after.append(slot)
        self.recent.append(slot)

    def backfill(self, sign: float, best_score: float, stop_step: int) -> tuple[int | None, int]:
        """At a stop: (the step to deliver, the skipped opportunities evaluated to find it).
        Opportunities after ``stop_step`` do not exist yet; a non-finite score never wins; ties
        go to the best eval."""
        skipped = [s for s in (*self.before, *self.after) if not s.used and s.step <= stop_step]
        step, score = self.best_step, best_score
        for slot in skipped:
            if math.isfinite(slot.score) and sign * (slot.score - score) > 0.0:
                step, score = slot.step, slot.score
        return step, len(skipped)
