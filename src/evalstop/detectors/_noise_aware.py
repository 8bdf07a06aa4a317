"""EvalStop with declines measured against the eval's standard error."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validation import (
    MAX_COUNT,
    MAX_SCALE,
    InvalidParameterError,
    check_choice,
    check_float,
    check_int,
)
from ._base import Detector, Eval, RuleEvidence, State, is_valid, offer, sign_of
from ._noise import (
    MAX_ITEMS,
    MAX_Z,
    SIGMA_WINDOW,
    finite_items,
    mean_and_se,
    online_sigma,
    push_value,
    sigma_state,
)


@dataclass(frozen=True)
class NoiseAware(Detector):
    """Stop after ``k`` consecutive valid evals that each fall below the reference (running
    best or previous eval) by more than ``z`` standard errors of the difference,
    ``z * sqrt(se_ref**2 + se_eval**2)``.

    An eval's standard error comes from, in order: its own per-item scores (an ``ItemEval``,
    sd / sqrt(n), used only with ``items=true``, for evals that draw fresh prompts each time);
    ``sigma`` (the eval noise sd the job reports, > 0); ``n_items`` (the eval sample size the
    job reports: ``item_sd / sqrt(n_items)``, where ``item_sd = 0.5`` bounds the sd of any item
    score in [0, 1]); otherwise the online estimate from the second differences of the last
    ``SIGMA_WINDOW`` valid scores (``_noise.online_sigma``). Give at most one of ``sigma`` and ``n_items``.
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
        check_int(owner, "k", self.k, min_value=1, max_value=MAX_COUNT)
        check_float(owner, "z", self.z, low=0.0, high=MAX_Z)
        check_choice(owner, "against", self.against, ("previous", "best"))
        check_float(owner, "sigma", self.sigma, low=0.0, high=MAX_SCALE)
        check_int(owner, "n_items", self.n_items, min_value=0, max_value=MAX_ITEMS)
        check_float(owner, "item_sd", self.item_sd, low=0.0, high=MAX_SCALE, low_open=True)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0, max_value=MAX_COUNT)
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
        """The standard error of ``ev`` from its items, its own ``stderr`` or the job's report;
        None if unknown."""
        items = finite_items(ev) if self.items else None
        if items is not None:
            return mean_and_se(items)[1]
        if ev.stderr is not None and math.isfinite(ev.stderr) and ev.stderr > 0.0:
            return ev.stderr
        if self.sigma > 0:
            return self.sigma
        if self.n_items > 0:
            return self.item_sd / math.sqrt(self.n_items)
        return None

    @property
    def state_window(self) -> int:
        return 2 * SIGMA_WINDOW + 2

    def rule_state(self) -> State:
        # The reference (best or previous valid eval): its score and reported standard error.
        return {"ref_score": None, "ref_se": None, "n_valid": 0, "run": 0, **sigma_state()}

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        if not is_valid(ev.score):
            state["n_invalid"] += 1
            return None
        se_here = self.reported_se(ev)
        push_value(state, ev.score)
        ref_score, ref_se = state["ref_score"], state["ref_se"]
        sign = sign_of(self.mode)
        if offer(state, sign, index, ev) or self.against == "previous":
            state["ref_score"], state["ref_se"] = ev.score, se_here
        n_valid = state["n_valid"] = state["n_valid"] + 1
        if n_valid <= max(1, self.n_warmup_evals) or ref_score is None:
            return None
        online = online_sigma(state) or 0.0
        se_ref = online if ref_se is None else ref_se
        se_cur = online if se_here is None else se_here
        margin = self.z * math.hypot(se_ref, se_cur)
        run = state["run"] = state["run"] + 1 if sign * (ref_score - ev.score) > margin else 0
        if run >= self.k:
            return (
                f"{run} consecutive declines vs {self.against} larger than z={self.z} "
                f"standard errors ({margin:.3g})"
            )
        return None

    def evidence(self, state: State) -> RuleEvidence:
        ref = state["ref_score"]
        band = None
        if ref is not None:
            online = online_sigma(state) or 0.0
            se_next = self.reported_se(Eval(0, ref))  # the job's report applies to any eval
            se_ref = state["ref_se"] if state["ref_se"] is not None else online
            margin = self.z * math.hypot(se_ref, online if se_next is None else se_next)
            band = ref - sign_of(self.mode) * margin
        return RuleEvidence(float(state["run"]), float(self.k), "consecutive significant declines", band,
                            f"significance band (reference - z x SE of the difference, z={self.z})")

    def running_reason(self, state: State) -> str:
        return f"{state['run']} consecutive significant declines < k={self.k}"
