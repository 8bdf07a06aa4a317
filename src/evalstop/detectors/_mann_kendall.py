"""Mann-Kendall trend test on the evals after the running best."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import check_choice, check_float, check_int
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid
from ._noise import z_quantile


@dataclass(frozen=True)
class MannKendall(Detector):
    """Stop when the valid evals strictly after the running best show a significant downward
    trend (one-sided Mann-Kendall test at level ``alpha``, normal approximation with tie
    correction and continuity correction) and there are at least ``min_window`` of them.

    The best itself is left out of the window: it is the maximum, so it would make every window
    look like a decline. A new best empties the window. Error control: each test has level
    ``alpha`` against a trendless (exchangeable) window; the rule tests once per eval, so the
    false-alarm rate per run is higher than ``alpha``. Ties carry no trend; an all-tied window
    never fires. NaN/inf scores are skipped.
    """

    alpha: float = 0.05
    min_window: int = 5
    min_delta: float = 0.0
    mode: str = "max"
    name = "mann-kendall"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "alpha", self.alpha, low=0.0, high=0.5, low_open=True, high_open=True)
        check_int(owner, "min_window", self.min_window, min_value=3)
        check_float(owner, "min_delta", self.min_delta, low=0.0)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        window: list[float] = []
        critical = z_quantile(self.alpha)
        for i, ev in enumerate(evals):
            if not is_valid(ev.score):
                best.n_invalid += 1
                continue
            if best.offer(i, ev):
                window = []
                continue
            window.append(best.sign * ev.score)
            if len(window) < self.min_window or not best.better(best.score or 0.0, ev.score, self.min_delta):
                continue
            z = mann_kendall_z(window)
            if z < -critical:
                reason = (
                    f"Mann-Kendall z={z:.3g} over {len(window)} evals after the best "
                    f"< -{critical:.3g} (alpha={self.alpha})"
                )
                return best.verdict(Decision.STOP, reason, (i, ev.step))
        return best.verdict(Decision.CONTINUE, f"no significant decline after the best (alpha={self.alpha})")


def mann_kendall_z(values: Sequence[float]) -> float:
    """The Mann-Kendall statistic S of ``values`` as a continuity-corrected z score.

    Var(S) = [n(n-1)(2n+5) - sum_t t(t-1)(2t+5)] / 18 over groups of t tied values. Returns 0
    when the variance is 0 (every value tied).
    """
    n = len(values)
    s = sum(_sign(values[j] - values[i]) for i in range(n) for j in range(i + 1, n))
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    ties = sum(t * (t - 1) * (2 * t + 5) for t in counts.values())
    var = (n * (n - 1) * (2 * n + 5) - ties) / 18.0
    if var <= 0 or s == 0:
        return 0.0
    return (s - math.copysign(1.0, s)) / math.sqrt(var)


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)
