"""The paper's rule: stop after ``k`` consecutive declines of the eval score."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import check_choice, check_float, check_int
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid


@dataclass(frozen=True)
class KDeclines(Detector):
    """Stop when ``k`` consecutive valid evals each count as a decline.

    A *decline* is an eval worse than the reference by more than ``min_delta``; the reference
    is the previous valid eval (``against="previous"``, the paper's reading) or the running
    best (``against="best"``). Any eval that is not a decline resets the count, ties included.
    The first ``n_warmup_evals`` valid evals set the reference but never count as declines.
    NaN/inf scores are skipped: they neither count nor reset.
    """

    k: int = 2
    min_delta: float = 0.0
    against: str = "previous"
    n_warmup_evals: int = 0
    mode: str = "max"
    name = "evalstop"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "k", self.k, min_value=1)
        check_float(owner, "min_delta", self.min_delta, low=0.0)
        check_choice(owner, "against", self.against, ("previous", "best"))
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        previous: float | None = None
        n_valid = 0
        run = 0
        for i, ev in enumerate(evals):
            if not is_valid(ev.score):
                best.n_invalid += 1
                continue
            reference = previous if self.against == "previous" else best.score
            declined = reference is not None and best.better(reference, ev.score, self.min_delta)
            best.offer(i, ev)
            previous = ev.score
            n_valid += 1
            run = run + 1 if declined and n_valid > self.n_warmup_evals else 0
            if run >= self.k:
                reason = f"{self.k} consecutive declines vs {self.against} (min_delta={self.min_delta})"
                return best.verdict(Decision.STOP, reason, (i, ev.step))
        return best.verdict(Decision.CONTINUE, f"{run} consecutive declines < k={self.k}")
