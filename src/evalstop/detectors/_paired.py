"""Paired test of each eval against the best checkpoint on the same eval prompts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .._validation import MAX_COUNT, MAX_SCALE, check_choice, check_float, check_int
from ._base import Detector, Eval, State, is_valid, offer, sign_of
from ._noise import (
    MIN_ALPHA,
    SIGMA_WINDOW,
    finite_items,
    mean_and_se,
    online_sigma,
    push_value,
    sigma_state,
    z_quantile,
)


@dataclass(frozen=True)
class Paired(Detector):
    """Stop after ``k`` consecutive valid evals that are significantly worse than the best
    checkpoint so far by a one-sided paired t-test at level ``alpha`` on the per-item scores:
    the test of "worse by more than ``min_delta``" (a decline too small to matter is ignored
    however sure it is; with many prompts even a 0.005 decline is significant).

    Both evals must be ``ItemEval`` s with the same number of finite items (the same prompts in
    the same order); the test is on the per-prompt differences, so the spread of prompt
    difficulty cancels. When either lacks such items the comparison falls back to an unpaired
    test: a drop larger than ``min_delta + z_{1-alpha} * sqrt(2) * sigma``, with sigma estimated
    online from the second differences of the last ``SIGMA_WINDOW`` scores (as ``noise-aware``).
    The state keeps the best checkpoint's score and per-item scores, nothing else per eval. The
    first ``n_warmup_evals`` valid evals never count. Error control: each comparison has level
    ``alpha`` if the checkpoints are equally good, but the best is the maximum of noisy evals
    (winner's curse), so a paired comparison with it is biased towards "worse"; ``k`` > 1 or a
    small ``alpha`` pays for that. NaN/inf scores are skipped.
    """

    k: int = 2
    alpha: float = 0.01
    min_delta: float = 0.0
    n_warmup_evals: int = 3
    mode: str = "max"
    name = "paired"
    reads = ("items",)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "k", self.k, min_value=1, max_value=MAX_COUNT)
        check_float(owner, "alpha", self.alpha, low=MIN_ALPHA, high=0.5, high_open=True)
        check_float(owner, "min_delta", self.min_delta, low=0.0, high=MAX_SCALE)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0, max_value=MAX_COUNT)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    @property
    def state_window(self) -> int:
        return 2 * SIGMA_WINDOW + 2  # plus the best checkpoint's per-item scores

    def rule_state(self) -> State:
        return {"best_items": None, "n_valid": 0, "run": 0, **sigma_state()}

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        if not is_valid(ev.score):
            state["n_invalid"] += 1
            return None
        push_value(state, ev.score)
        ref_score, ref_items = state["best_score"], state["best_items"]
        if offer(state, sign_of(self.mode), index, ev):
            items = finite_items(ev)
            state["best_items"] = None if items is None else list(items)
        n_valid = state["n_valid"] = state["n_valid"] + 1
        if ref_score is None or n_valid <= self.n_warmup_evals:
            return None
        worse, how = self.worse(ref_score, ref_items, ev, online_sigma(state) or 0.0)
        run = state["run"] = state["run"] + 1 if worse else 0
        if run >= self.k:
            return f"{run} consecutive evals worse than the best checkpoint ({how}, alpha={self.alpha})"
        return None

    def running_reason(self, state: State) -> str:
        return f"{state['run']} consecutive significant declines < k={self.k}"

    def worse(
        self, ref_score: float, ref_items: Sequence[float] | None, ev: Eval, sigma: float
    ) -> tuple[bool, str]:
        """Whether ``ev`` is significantly worse than the best checkpoint (its score and finite
        per-item scores), and which test said so; ``sigma`` is the online noise estimate."""
        sign = 1.0 if self.mode == "max" else -1.0
        b = finite_items(ev)
        if ref_items is not None and b is not None and len(ref_items) == len(b):
            diffs = [sign * (x - y) for x, y in zip(ref_items, b, strict=True)]
            min_delta = self.min_delta
            if not all(map(math.isfinite, diffs)):  # past the float limit: t is the same on halves
                diffs = [sign * (x / 2 - y / 2) for x, y in zip(ref_items, b, strict=True)]
                min_delta /= 2
            mean, se = mean_and_se(diffs)
            mean -= min_delta
            if se == 0.0:
                return mean > 0.0, "paired, no spread"
            t = mean / se
            return t > t_critical(self.alpha, len(diffs) - 1), f"paired t={t:.3g} on {len(diffs)} items"
        drop = sign * (ref_score - ev.score)
        margin = self.min_delta + z_quantile(self.alpha) * math.sqrt(2.0) * sigma
        return drop > margin, "unpaired, online sigma"


@lru_cache(maxsize=256)
def t_critical(alpha: float, df: int) -> float:
    """The one-sided Student-t critical value (scipy is imported on first use)."""
    from scipy.stats import t

    return float(t.ppf(1.0 - alpha, df))
