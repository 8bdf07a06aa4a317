"""Mann-Kendall trend test on the evals after the running best."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import MAX_COUNT, MAX_SCALE, check_choice, check_float, check_int
from ._base import Detector, Eval, State, is_valid, offer, sign_of
from ._noise import MIN_ALPHA, z_quantile


@dataclass(frozen=True)
class MannKendall(Detector):
    """Stop when the valid evals strictly after the running best show a significant downward
    trend (one-sided Mann-Kendall test at level ``alpha``, normal approximation with tie
    correction and continuity correction) and there are at least ``min_window`` of them.
    The test looks at the last ``max_window`` of them at most: the state keeps that window in
    arrival order and sorted, with S and the tie term updated as a value enters or leaves, so an
    eval costs O(log max_window) comparisons however long the decline.

    The best itself is left out of the window: it is the maximum, so it would make every window
    look like a decline. A new best empties the window. Error control: each test has level
    ``alpha`` against a trendless (exchangeable) window; the rule tests once per eval, so the
    false-alarm rate per run is higher than ``alpha``. Ties carry no trend; an all-tied window
    never fires. NaN/inf scores are skipped.
    """

    alpha: float = 0.05
    min_window: int = 5
    max_window: int = 64
    min_delta: float = 0.0
    mode: str = "max"
    name = "mann-kendall"
    size_params = ("max_window",)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "alpha", self.alpha, low=MIN_ALPHA, high=0.5, high_open=True)
        check_int(owner, "min_window", self.min_window, min_value=3, max_value=MAX_COUNT)
        check_int(owner, "max_window", self.max_window, min_value=self.min_window, max_value=MAX_COUNT)
        check_float(owner, "min_delta", self.min_delta, low=0.0, high=MAX_SCALE)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    @property
    def state_window(self) -> int:
        return 2 * self.max_window

    def rule_state(self) -> State:
        # The window after the best (sign * score), in arrival order and sorted; Mann-Kendall's
        # S over it and the tie term sum t(t-1)(2t+5) over its groups of tied values.
        return {"window": [], "window_sorted": [], "mk_s": 0, "mk_ties": 0}

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        if not is_valid(ev.score):
            state["n_invalid"] += 1
            return None
        sign = sign_of(self.mode)
        if offer(state, sign, index, ev):
            state.update(window=[], window_sorted=[], mk_s=0, mk_ties=0)
            return None
        _mk_push(state, sign * ev.score, self.max_window)
        n = len(state["window"])
        if n < self.min_window or not sign * (state["best_score"] - ev.score) > self.min_delta:
            return None
        z = _mk_z(state["mk_s"], n, state["mk_ties"])
        critical = z_quantile(self.alpha)
        if z < -critical:
            return (
                f"Mann-Kendall z={z:.3g} over {n} evals after the best "
                f"< -{critical:.3g} (alpha={self.alpha})"
            )
        return None

    def running_reason(self, state: State) -> str:
        return f"no significant decline after the best (alpha={self.alpha})"


def _tie_term(t: int) -> int:
    return t * (t - 1) * (2 * t + 5)


def _mk_push(state: State, value: float, max_window: int) -> None:
    """Append ``value`` to the window (dropping its oldest value beyond ``max_window``) and
    update S and the tie term: O(log n) comparisons plus a list insert/delete."""
    window, ordered = state["window"], state["window_sorted"]
    lo, hi = bisect_left(ordered, value), bisect_right(ordered, value)
    # The new value comes last: it adds sign(value - w) over the window.
    state["mk_s"] += lo - (len(ordered) - hi)
    state["mk_ties"] += _tie_term(hi - lo + 1) - _tie_term(hi - lo)
    ordered.insert(hi, value)
    window.append(value)
    if len(window) > max_window:
        old = window.pop(0)
        lo, hi = bisect_left(ordered, old), bisect_right(ordered, old)
        # The oldest value came first: it took part in sign(w - old) for every other w.
        state["mk_s"] -= (len(ordered) - hi) - lo
        state["mk_ties"] += _tie_term(hi - lo - 1) - _tie_term(hi - lo)
        del ordered[lo]


def _mk_z(s: int, n: int, ties: int) -> float:
    var = (n * (n - 1) * (2 * n + 5) - ties) / 18.0
    if var <= 0 or s == 0:
        return 0.0
    return (s - math.copysign(1.0, s)) / math.sqrt(var)


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
    return _mk_z(s, n, sum(_tie_term(t) for t in counts.values()))


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)
