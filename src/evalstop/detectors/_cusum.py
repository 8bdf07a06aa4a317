"""One-sided CUSUM (Page-Hinkley) on drops below the running best, in units of eval noise."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validation import MAX_COUNT, MAX_SCALE, check_choice, check_float, check_int, check_share
from ._base import Detector, Eval, RuleEvidence, State, is_valid, offer, sign_of
from ._noise import SIGMA_WINDOW, online_sigma, push_value, sigma_state

#: Stand-in for a zero noise estimate: any real drop then counts as many sigmas.
_TINY = 1e-12
#: Cap on the statistic, so that the state stays finite (JSON) after a huge drop.
_G_CAP = 1e300
#: The most ``threshold`` and ``drift`` may be, in noise sds (a real one is below 100).
MAX_THRESHOLD = 1e6


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

    Cadence: ``drift``, ``threshold`` and ``n_warmup_evals`` count evals, so they change meaning
    when evals are spaced differently. Three optional parameters count training progress
    instead (they need ``Eval.progress``: an eval without a finite one adds nothing to the
    statistic, fail-safe, and its span counts at the next eval that has one):
    ``per`` > 0 weighs each eval's increment by the progress since the previous valid eval
    divided by ``per`` (the statistic then sums drop-over-progress, the same at any spacing);
    ``warmup`` > 0 accumulates nothing before that much progress; ``sigma_from="best"`` measures
    drops in the noise estimated up to the running best, so that a decline (whose curvature
    second differences see at sparse cadence) does not inflate its own yardstick.
    An eval's own ``stderr``, when given, is used as its noise sd (docs/noise-rules.md).

    Persistence: ``hold`` > 0 (a share of training progress) fires only once ``g`` has stayed over
    the threshold for that much progress with every eval since still more than ``drift`` noise sds
    below the best (the *alarm*); an eval back within that margin, a new best or ``g`` falling to
    the threshold ends the alarm. A collapse that recovers within ``hold`` is then never stopped,
    while a decline that persists still is, ``hold`` later (at sparse cadence the delivered
    checkpoint is the best one, so the later stop costs compute, not quality). The alarm needs
    ``Eval.progress``: without a finite one the span cannot complete (fail-safe).

    Adaptive cadence: ``elevate="best"`` (default) calls the evidence elevated whenever the latest
    eval is below the running best (``Detector.elevated``); ``elevate="g"`` only while the
    statistic ``g`` is above 0, i.e. once the drops have outrun the drift, so that a plateau that
    wobbles under its best does not ask for every eval.
    """

    threshold: float = 5.0
    drift: float = 2.0
    sigma: float = 0.0
    min_delta: float = 1e-3
    n_warmup_evals: int = 5
    mode: str = "max"
    per: float = 0.0
    warmup: float = 0.0
    sigma_from: str = "all"
    elevate: str = "best"
    hold: float = 0.0
    name = "cusum"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "threshold", self.threshold, low=0.0, high=MAX_THRESHOLD, low_open=True)
        check_float(owner, "drift", self.drift, low=0.0, high=MAX_THRESHOLD)
        check_float(owner, "sigma", self.sigma, low=0.0, high=MAX_SCALE)
        check_float(owner, "min_delta", self.min_delta, low=0.0, high=MAX_SCALE)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=1, max_value=MAX_COUNT)
        check_choice(owner, "mode", self.mode, ("max", "min"))
        check_share(owner, "per", self.per)
        check_float(owner, "warmup", self.warmup, low=0.0, high=1.0)
        check_choice(owner, "sigma_from", self.sigma_from, ("all", "best"))
        check_choice(owner, "elevate", self.elevate, ("best", "g"))
        check_share(owner, "hold", self.hold)

    @property
    def state_window(self) -> int:
        return 2 * SIGMA_WINDOW + 2

    def rule_state(self) -> State:
        state: State = {"g": 0.0, "n_valid": 0, **sigma_state()}
        if self.per > 0.0:
            state["last_progress"] = None
        if self.sigma_from == "best":
            state["sigma_best"] = None
        if self.hold > 0.0:
            state["alarm_since"] = None
        return state

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        if not is_valid(ev.score):
            state["n_invalid"] += 1
            return None
        reference = state["best_score"]
        if self.sigma == 0.0:
            push_value(state, ev.score)
        sign = sign_of(self.mode)
        n_valid = state["n_valid"] = state["n_valid"] + 1
        weight = self._weight(state, ev)
        if offer(state, sign, index, ev) or reference is None or n_valid <= self.n_warmup_evals:
            state["g"] = 0.0
            if self.hold > 0.0:
                state["alarm_since"] = None
            if self.sigma_from == "best":
                state["sigma_best"] = online_sigma(state)
            return None
        if self.warmup > 0.0 and not (ev.progress is not None and ev.progress >= self.warmup):
            return None
        sigma = max(self._sigma(state, ev), _TINY)
        drop = sign * (reference - ev.score)
        if drop <= self.min_delta:
            drop = 0.0
        g = state["g"] = min(max(0.0, state["g"] + weight * (drop / sigma - self.drift)), _G_CAP)
        if g <= self.threshold:
            if self.hold > 0.0:
                state["alarm_since"] = None
            return None
        if self.hold > 0.0 and not self._held(state, ev, drop / sigma):
            return None
        held = f", held {self.hold} of progress" if self.hold > 0.0 else ""
        return f"CUSUM of drops from the best {g:.3g} > {self.threshold} (sigma={sigma:.3g}){held}"

    def _held(self, state: State, ev: Eval, z: float) -> bool:
        """Whether the alarm (``g`` over the threshold) has held for ``hold`` of progress with
        every eval since still more than ``drift`` noise sds below the best. An eval back within
        that margin ends the alarm (a collapse that recovers); one without a finite progress
        cannot complete the span (fail-safe)."""
        progress = ev.progress
        if z <= self.drift:
            state["alarm_since"] = None
            return False
        if progress is None or not math.isfinite(progress):
            return False
        since = state["alarm_since"]
        if since is None:
            since = state["alarm_since"] = progress
        return bool(progress - since >= self.hold)

    def _weight(self, state: State, ev: Eval) -> float:
        """The eval's weight: 1, or the progress since the previous valid eval with progress over
        ``per`` (0 for an eval without a finite progress: a missing value never fires the rule)."""
        if self.per <= 0.0:
            return 1.0
        last, progress = state["last_progress"], ev.progress
        if progress is None or not math.isfinite(progress):
            return 0.0
        state["last_progress"] = progress
        return max(progress - (last or 0.0), 0.0) / self.per

    def _sigma(self, state: State, ev: Eval) -> float:
        stderr = ev.stderr
        if stderr is not None and math.isfinite(stderr) and stderr > 0.0:
            return stderr
        if self.sigma:
            return self.sigma
        if self.sigma_from == "best":
            return float(state["sigma_best"] or online_sigma(state) or 0.0)
        return online_sigma(state) or 0.0

    def evidence(self, state: State) -> RuleEvidence:
        """The statistic ``g``; the band is the score below which the next eval fires the rule
        (drawn only for the per-eval form: with ``per`` it depends on the next eval's spacing)."""
        g, best = float(state["g"]), state["best_score"]
        band = None
        if best is not None and self.per == 0.0 and state["n_valid"] >= self.n_warmup_evals:
            sigma = self.sigma or (state["sigma_best"] if self.sigma_from == "best" else None) \
                or online_sigma(state) or 0.0
            # an eval more than ``factor`` sds below the best takes g over the threshold; with a
            # hold it must also be more than ``drift`` sds below the best to start or keep the alarm
            factor = self.threshold - g + self.drift
            factor = max(factor, self.drift) if self.hold > 0.0 else factor
            band = best - sign_of(self.mode) * max(sigma * factor, self.min_delta)
        if self.hold == 0.0:
            return RuleEvidence(g, self.threshold, "CUSUM of drops in noise sds", band,
                                "the next eval below this fires the rule (at the current noise estimate)")
        since = state["alarm_since"]
        label = "CUSUM of drops in noise sds" + (
            f" (over the limit for {self.hold:g} of progress fires it)" if since is None
            else f" (over the limit since progress {since:.3g}; fires once held {self.hold:g})")
        return RuleEvidence(g, self.threshold, label, band,
                            f"an eval below this starts or keeps the alarm; the rule fires once the alarm "
                            f"has held {self.hold:g} of progress")

    def elevated(self, state: State) -> bool:
        if self.elevate == "g":
            return float(state["g"]) > 0.0
        return super().elevated(state)

    def running_reason(self, state: State) -> str:
        since = state.get("alarm_since")
        if since is not None:
            return f"CUSUM {state['g']:.3g} > threshold={self.threshold} since progress {since:.3g}, " \
                   f"not yet held {self.hold:g}"
        return f"CUSUM {state['g']:.3g} <= threshold={self.threshold}"
