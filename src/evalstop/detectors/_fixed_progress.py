"""Competitor: stop every watched job once it reaches a fixed fraction of its budget."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validation import check_choice, check_float
from ._base import Detector, Eval, State, track_best


@dataclass(frozen=True)
class FixedProgress(Detector):
    """Stop at the first eval whose ``progress`` is at least ``at`` ("StopAt-0.65").

    The rule never looks at the score, so it cannot tell a hacking run from a healthy one; the
    score only chooses the best checkpoint. Evals without a finite progress never fire.
    """

    at: float = 0.65
    mode: str = "max"
    name = "fixed-progress"
    reads = ("progress",)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "at", self.at, low=0.0, high=1.0)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        track_best(state, self.mode, index, ev)
        progress = ev.progress
        if progress is not None and math.isfinite(progress) and progress >= self.at:
            return f"progress {progress:.3g} reached the fixed stop point at={self.at}"
        return None

    def running_reason(self, state: State) -> str:
        return f"progress below at={self.at}"
