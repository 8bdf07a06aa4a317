"""Paired test of each eval against the best checkpoint on the same eval prompts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .._validation import check_choice, check_float, check_int
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid
from ._noise import curve_sigma, finite_items, mean_and_se, z_quantile


@dataclass(frozen=True)
class Paired(Detector):
    """Stop after ``k`` consecutive valid evals that are significantly worse than the best
    checkpoint so far by a one-sided paired t-test at level ``alpha`` on the per-item scores:
    the test of "worse by more than ``min_delta``" (a decline too small to matter is ignored
    however sure it is; with many prompts even a 0.005 decline is significant).

    Both evals must be ``ItemEval`` s with the same number of finite items (the same prompts in
    the same order); the test is on the per-prompt differences, so the spread of prompt
    difficulty cancels. When either lacks such items the comparison falls back to an unpaired
    test: a drop larger than ``min_delta + z_{1-alpha} * sqrt(2) * sigma``, with sigma estimated online from
    the curve's second differences (as ``noise-aware``). The first ``n_warmup_evals`` valid evals
    never count. Error control: each comparison has level ``alpha`` if the checkpoints are
    equally good, but the best is the maximum of noisy evals (winner's curse), so a paired
    comparison with it is biased towards "worse"; ``k`` > 1 or a small ``alpha`` pays for that.
    NaN/inf scores are skipped.
    """

    k: int = 2
    alpha: float = 0.01
    min_delta: float = 0.0
    n_warmup_evals: int = 3
    mode: str = "max"
    name = "paired"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "k", self.k, min_value=1)
        check_float(owner, "alpha", self.alpha, low=0.0, high=0.5, low_open=True, high_open=True)
        check_float(owner, "min_delta", self.min_delta, low=0.0)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        values: list[float] = []
        best_ev: Eval | None = None
        run = 0
        for i, ev in enumerate(evals):
            if not is_valid(ev.score):
                best.n_invalid += 1
                continue
            values.append(ev.score)
            reference = best_ev
            if best.offer(i, ev):
                best_ev = ev
            if reference is None or len(values) <= self.n_warmup_evals:
                continue
            worse, how = self.worse(reference, ev, values)
            run = run + 1 if worse else 0
            if run >= self.k:
                reason = f"{run} consecutive evals worse than the best checkpoint ({how}, alpha={self.alpha})"
                return best.verdict(Decision.STOP, reason, (i, ev.step))
        return best.verdict(Decision.CONTINUE, f"{run} consecutive significant declines < k={self.k}")

    def worse(self, reference: Eval, ev: Eval, values: Sequence[float]) -> tuple[bool, str]:
        """Whether ``ev`` is significantly worse than ``reference``, and which test said so."""
        sign = 1.0 if self.mode == "max" else -1.0
        a, b = finite_items(reference), finite_items(ev)
        if a is not None and b is not None and len(a) == len(b):
            diffs = [sign * (x - y) for x, y in zip(a, b, strict=True)]
            mean, se = mean_and_se(diffs)
            mean -= self.min_delta
            if se == 0.0:
                return mean > 0.0, "paired, no spread"
            t = mean / se
            return t > t_critical(self.alpha, len(diffs) - 1), f"paired t={t:.3g} on {len(diffs)} items"
        sigma = curve_sigma(values) or 0.0
        drop = sign * (reference.score - ev.score)
        margin = self.min_delta + z_quantile(self.alpha) * math.sqrt(2.0) * sigma
        return drop > margin, "unpaired, online sigma"


@lru_cache(maxsize=256)
def t_critical(alpha: float, df: int) -> float:
    """The one-sided Student-t critical value (scipy is imported on first use)."""
    from scipy.stats import t

    return float(t.ppf(1.0 - alpha, df))
