"""Competitor: a SLAQ-style rule that stops when the marginal loss reduction becomes small."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import check_choice, check_float, check_int
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid


@dataclass(frozen=True)
class SlaqLoss(Detector):
    """Stop when the loss reduction over the last ``window`` valid evals, divided by the total
    reduction since the first valid eval, falls below ``threshold``.

    This is the quality signal of loss-driven schedulers (SLAQ): a job whose recent evals buy
    little of the loss reduction it has achieved is deemed converged. The rule may fire only
    once more than ``max(window, n_warmup_evals)`` valid losses have been seen. While the loss
    has not decreased overall (total reduction <= 0) the ratio is undefined and the rule does
    not fire. Only ``Eval.loss`` drives the rule; missing or non-finite losses are skipped.
    """

    threshold: float = 0.02
    window: int = 2
    n_warmup_evals: int = 2
    mode: str = "max"
    name = "slaq"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "threshold", self.threshold, low=0.0, high=1.0)
        check_int(owner, "window", self.window, min_value=1)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        losses: list[float] = []
        for i, ev in enumerate(evals):
            if is_valid(ev.score):
                best.offer(i, ev)
            else:
                best.n_invalid += 1
            if ev.loss is None or not math.isfinite(ev.loss):
                continue
            losses.append(ev.loss)
            if len(losses) <= max(self.window, self.n_warmup_evals):
                continue
            total = losses[0] - losses[-1]
            recent = losses[-1 - self.window] - losses[-1]
            if total > 0 and recent / total < self.threshold:
                reason = (
                    f"loss fell {recent:.4g} over the last {self.window} evals, "
                    f"{recent / total:.3g} of its total reduction {total:.4g} < threshold={self.threshold}"
                )
                return best.verdict(Decision.STOP, reason, (i, ev.step))
        return best.verdict(Decision.CONTINUE, f"marginal loss reduction >= threshold={self.threshold}")
