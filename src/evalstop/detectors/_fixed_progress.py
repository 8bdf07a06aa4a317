"""Competitor: stop every watched job once it reaches a fixed fraction of its budget."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import check_choice, check_float
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid


@dataclass(frozen=True)
class FixedProgress(Detector):
    """Stop at the first eval whose ``progress`` is at least ``at`` ("StopAt-0.65").

    The rule never looks at the score, so it cannot tell a hacking run from a healthy one; the
    score only chooses the best checkpoint. Evals without a finite progress never fire.
    """

    at: float = 0.65
    mode: str = "max"
    name = "fixed-progress"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "at", self.at, low=0.0, high=1.0)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        for i, ev in enumerate(evals):
            if is_valid(ev.score):
                best.offer(i, ev)
            else:
                best.n_invalid += 1
            progress = ev.progress
            if progress is not None and math.isfinite(progress) and progress >= self.at:
                reason = f"progress {progress:.3g} reached the fixed stop point at={self.at}"
                return best.verdict(Decision.STOP, reason, (i, ev.step))
        return best.verdict(Decision.CONTINUE, f"progress below at={self.at}")
