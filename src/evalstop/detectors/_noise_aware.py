"""EvalStop with declines measured against the eval's standard error."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import InvalidParameterError, check_choice, check_float, check_int
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid
from ._noise import curve_sigma, finite_items, mean_and_se


@dataclass(frozen=True)
class NoiseAware(Detector):
    """Stop after ``k`` consecutive valid evals that each fall below the reference (running
    best or previous eval) by more than ``z`` standard errors of the difference,
    ``z * sqrt(se_ref**2 + se_eval**2)``.

    An eval's standard error comes from, in order: its own per-item scores (an ``ItemEval``,
    sd / sqrt(n), used only with ``items=true``, for evals that draw fresh prompts each time);
    ``sigma`` (the eval noise sd the job reports, > 0); ``n_items`` (the eval sample size the
    job reports: ``item_sd / sqrt(n_items)``, where ``item_sd = 0.5`` bounds the sd of any item
    score in [0, 1]); otherwise the online estimate from the second differences of the valid
    scores so far (``_noise.curve_sigma``). Give at most one of ``sigma`` and ``n_items``.
    When every eval scores the same prompts, the item spread includes the prompts' difficulty,
    which does not change between evals: the item SE then overstates the eval-to-eval noise
    (use ``paired`` for such data; hence ``items=false`` by default).
    The first ``n_warmup_evals`` valid evals never count as declines. Error control: under
    Gaussian noise one comparison is a false decline with probability about 1 - Phi(z); ``k``
    in a row multiplies that down (comparisons with the same best are positively correlated,
    so less than the product). NaN/inf scores are skipped: they neither count nor reset.
    """

    k: int = 2
    z: float = 3.0
    against: str = "best"
    sigma: float = 0.0
    n_items: int = 0
    item_sd: float = 0.5
    items: bool = False
    n_warmup_evals: int = 4
    mode: str = "max"
    name = "noise-aware"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "k", self.k, min_value=1)
        check_float(owner, "z", self.z, low=0.0)
        check_choice(owner, "against", self.against, ("previous", "best"))
        check_float(owner, "sigma", self.sigma, low=0.0)
        check_int(owner, "n_items", self.n_items, min_value=0)
        check_float(owner, "item_sd", self.item_sd, low=0.0, low_open=True)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0)
        check_choice(owner, "mode", self.mode, ("max", "min"))
        if not isinstance(self.items, bool):
            raise InvalidParameterError(
                f"The 'items' parameter of {owner} must be a bool. Got {self.items!r} instead."
            )
        if self.sigma > 0 and self.n_items > 0:
            raise InvalidParameterError(
                f"{owner} takes at most one of 'sigma' and 'n_items'. "
                f"Got sigma={self.sigma!r} and n_items={self.n_items!r} instead."
            )

    def reported_se(self, ev: Eval) -> float | None:
        """The standard error of ``ev`` from its items or the job's report; None if unknown."""
        items = finite_items(ev) if self.items else None
        if items is not None:
            return mean_and_se(items)[1]
        if self.sigma > 0:
            return self.sigma
        if self.n_items > 0:
            return self.item_sd / math.sqrt(self.n_items)
        return None

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        values: list[float] = []
        reported: list[float | None] = []
        best_pos = 0
        run = 0
        for i, ev in enumerate(evals):
            if not is_valid(ev.score):
                best.n_invalid += 1
                continue
            values.append(ev.score)
            reported.append(self.reported_se(ev))
            ref_pos = best_pos if self.against == "best" else len(values) - 2
            if best.offer(i, ev):
                best_pos = len(values) - 1
            if len(values) <= max(1, self.n_warmup_evals):
                continue
            online = curve_sigma(values) or 0.0
            se_ref, se_cur = (online if s is None else s for s in (reported[ref_pos], reported[-1]))
            margin = self.z * math.hypot(se_ref, se_cur)
            run = run + 1 if best.sign * (values[ref_pos] - ev.score) > margin else 0
            if run >= self.k:
                reason = (
                    f"{run} consecutive declines vs {self.against} larger than z={self.z} "
                    f"standard errors ({margin:.3g})"
                )
                return best.verdict(Decision.STOP, reason, (i, ev.step))
        return best.verdict(Decision.CONTINUE, f"{run} consecutive significant declines < k={self.k}")
