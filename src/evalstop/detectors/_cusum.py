"""One-sided CUSUM (Page-Hinkley) on drops below the running best, in units of eval noise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import check_choice, check_float, check_int
from ._base import BestTracker, Decision, Detector, Eval, Verdict, is_valid
from ._noise import curve_sigma

#: Stand-in for a zero noise estimate: any real drop then counts as many sigmas.
_TINY = 1e-12


@dataclass(frozen=True)
class Cusum(Detector):
    """Accumulate ``g = max(0, g + drop / sigma - drift)`` over the evals since the running best,
    where ``drop`` is how far the eval is below the best; stop once ``g > threshold``.

    A new best resets ``g``. ``sigma`` is the eval noise sd when the job knows it; 0 estimates
    it online from the second differences of the valid scores so far (``_noise.curve_sigma``).
    Nothing accumulates during the first ``n_warmup_evals`` valid evals. Error control: on a
    flat curve with Gaussian noise the drop below the running best is about 1.5 sigma, so a ``drift``
    above that keeps ``g`` near 0; ``threshold`` sets the false-alarm rate (Page's average run length).
    NaN/inf scores are skipped.
    """

    threshold: float = 5.0
    drift: float = 2.0
    sigma: float = 0.0
    n_warmup_evals: int = 5
    mode: str = "max"
    name = "cusum"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "threshold", self.threshold, low=0.0, low_open=True)
        check_float(owner, "drift", self.drift, low=0.0)
        check_float(owner, "sigma", self.sigma, low=0.0)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=1)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        best = BestTracker(self.mode)
        values: list[float] = []
        g = 0.0
        for i, ev in enumerate(evals):
            if not is_valid(ev.score):
                best.n_invalid += 1
                continue
            reference = best.score
            values.append(ev.score)
            if best.offer(i, ev) or reference is None or len(values) <= self.n_warmup_evals:
                g = 0.0
                continue
            sigma = max(self.sigma or curve_sigma(values) or 0.0, _TINY)
            g = max(0.0, g + best.sign * (reference - ev.score) / sigma - self.drift)
            if g > self.threshold:
                reason = f"CUSUM of drops from the best {g:.3g} > {self.threshold} (sigma={sigma:.3g})"
                return best.verdict(Decision.STOP, reason, (i, ev.step))
        return best.verdict(Decision.CONTINUE, f"CUSUM {g:.3g} <= threshold={self.threshold}")
