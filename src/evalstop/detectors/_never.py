"""The null detector: baselines take the same code path and never stop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import check_choice
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid


@dataclass(frozen=True)
class NeverStop(Detector):
    """Never fires; still tracks the best eval so callers can report it."""

    mode: str = "max"
    name = "never"

    def __post_init__(self) -> None:
        check_choice(type(self).__name__, "mode", self.mode, ("max", "min"))

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        for i, ev in enumerate(evals):
            if is_valid(ev.score):
                best.offer(i, ev)
            else:
                best.n_invalid += 1
        return best.verdict(Decision.CONTINUE, "never stops")
