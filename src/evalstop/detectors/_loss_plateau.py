"""Competitor: stop when the training loss stops improving (a loss-plateau rule)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import check_choice, check_float, check_int
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid


@dataclass(frozen=True)
class LossPlateau(Detector):
    """Stop after ``patience`` consecutive evals whose training loss does not improve on the
    reference minimum by more than ``min_rel_delta`` (relative to ``|minimum|``).

    The reference minimum moves only on such a significant improvement (as in PyTorch's
    ``ReduceLROnPlateau``), so a slow, steady decline still resets the count once it adds up.
    The first ``n_warmup_evals`` valid losses set the reference but never count as stale.
    Only ``Eval.loss`` drives the rule; the score only chooses the best checkpoint. Missing or
    non-finite losses are skipped: they neither count nor reset.
    """

    patience: int = 3
    min_rel_delta: float = 0.01
    n_warmup_evals: int = 2
    mode: str = "max"
    name = "loss-plateau"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "patience", self.patience, min_value=1)
        check_float(owner, "min_rel_delta", self.min_rel_delta, low=0.0)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        reference: float | None = None
        n_valid = 0
        run = 0
        for i, ev in enumerate(evals):
            if is_valid(ev.score):
                best.offer(i, ev)
            else:
                best.n_invalid += 1
            loss = ev.loss
            if loss is None or not math.isfinite(loss):
                continue
            n_valid += 1
            if reference is None or loss < reference - self.min_rel_delta * abs(reference):
                reference, run = loss, 0
                continue
            run = run + 1 if n_valid > self.n_warmup_evals else 0
            if run >= self.patience:
                reason = (
                    f"training loss has not improved on {reference:.4g} by more than "
                    f"{self.min_rel_delta:.3g} (relative) for {run} evals (patience={self.patience})"
                )
                return best.verdict(Decision.STOP, reason, (i, ev.step))
        return best.verdict(Decision.CONTINUE, f"{run} stale evals < patience={self.patience}")
