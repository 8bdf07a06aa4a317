"""One-sided CUSUM (Page-Hinkley) on drops below the running best, in units of eval noise."""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import check_choice, check_float, check_int
from ._base import Detector, Eval, State, is_valid, offer, sign_of
from ._noise import SIGMA_WINDOW, online_sigma, push_value, sigma_state

#: Stand-in for a zero noise estimate: any real drop then counts as many sigmas.
_TINY = 1e-12
#: Cap on the statistic, so that the state stays finite (JSON) after a huge drop.
_G_CAP = 1e300


@dataclass(frozen=True)
class Cusum(Detector):
    """Accumulate ``g = max(0, g + drop / sigma - drift)`` over the evals since the running best,
    where ``drop`` is how far the eval is below the best; stop once ``g > threshold``.

    A new best resets ``g``. ``sigma`` is the eval noise sd when the job knows it; 0 estimates
    it online from the second differences of the last ``SIGMA_WINDOW`` valid scores
    (``_noise.online_sigma``). A drop of at most ``min_delta`` counts as no drop: a metric that
    sits at a ceiling and wobbles by float noise (an estimated sigma near 0) would otherwise
    turn a 1e-5 dip into millions of sigmas. The default 1e-3 is a tenth of one prompt on a
    100-prompt accuracy eval, and below the smallest decline a bank run shows (docs/noise-rules.md).
    Nothing accumulates during the first ``n_warmup_evals`` valid evals. Error control: on a
    flat curve with Gaussian noise the drop below the running best is about 1.5 sigma, so a ``drift``
    above that keeps ``g`` near 0; ``threshold`` sets the false-alarm rate (Page's average run length).
    NaN/inf scores are skipped.
    """

    threshold: float = 5.0
    drift: float = 2.0
    sigma: float = 0.0
    min_delta: float = 1e-3
    n_warmup_evals: int = 5
    mode: str = "max"
    name = "cusum"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "threshold", self.threshold, low=0.0, low_open=True)
        check_float(owner, "drift", self.drift, low=0.0)
        check_float(owner, "sigma", self.sigma, low=0.0)
        check_float(owner, "min_delta", self.min_delta, low=0.0)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=1)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    @property
    def state_window(self) -> int:
        return 2 * SIGMA_WINDOW + 2

    def rule_state(self) -> State:
        return {"g": 0.0, "n_valid": 0, **sigma_state()}

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        if not is_valid(ev.score):
            state["n_invalid"] += 1
            return None
        reference = state["best_score"]
        if self.sigma == 0.0:
            push_value(state, ev.score)
        sign = sign_of(self.mode)
        n_valid = state["n_valid"] = state["n_valid"] + 1
        if offer(state, sign, index, ev) or reference is None or n_valid <= self.n_warmup_evals:
            state["g"] = 0.0
            return None
        sigma = max(self.sigma or online_sigma(state) or 0.0, _TINY)
        drop = sign * (reference - ev.score)
        if drop <= self.min_delta:
            drop = 0.0
        g = state["g"] = min(max(0.0, state["g"] + drop / sigma - self.drift), _G_CAP)
        if g > self.threshold:
            return f"CUSUM of drops from the best {g:.3g} > {self.threshold} (sigma={sigma:.3g})"
        return None

    def running_reason(self, state: State) -> str:
        return f"CUSUM {state['g']:.3g} <= threshold={self.threshold}"
