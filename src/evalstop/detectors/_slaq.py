"""Competitor: a SLAQ-style rule that stops when the marginal loss reduction becomes small."""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import MAX_COUNT, check_choice, check_float, check_int
from ._base import Detector, Eval, State, finite_loss, track_best


@dataclass(frozen=True)
class SlaqLoss(Detector):
    """Stop when the loss reduction over the last ``window`` valid evals, divided by the total
    reduction since the first valid eval, falls below ``threshold``.

    This is the quality signal of loss-driven schedulers (SLAQ): a job whose recent evals buy
    little of the loss reduction it has achieved is deemed converged. The rule may fire only
    once more than ``max(window, n_warmup_evals)`` valid losses have been seen. While the loss
    has not decreased overall (total reduction <= 0) the ratio is undefined and the rule does
    not fire. Only ``Eval.loss`` drives the rule; missing or non-finite losses are skipped.
    """

    threshold: float = 0.02
    window: int = 2
    n_warmup_evals: int = 2
    mode: str = "max"
    name = "slaq"
    reads = ("loss",)
    size_params = ("window",)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_float(owner, "threshold", self.threshold, low=0.0, high=1.0)
        check_int(owner, "window", self.window, min_value=1, max_value=MAX_COUNT)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0, max_value=MAX_COUNT)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    @property
    def state_window(self) -> int:
        return self.window + 2  # the last window + 1 losses, and the first

    def rule_state(self) -> State:
        return {"first_loss": None, "recent_losses": [], "n_losses": 0}

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        track_best(state, self.mode, index, ev)
        loss = finite_loss(ev)
        if loss is None:
            return None
        if state["first_loss"] is None:
            state["first_loss"] = loss
        recent = state["recent_losses"]
        recent.append(loss)
        if len(recent) > self.window + 1:
            del recent[0]
        n_losses = state["n_losses"] = state["n_losses"] + 1
        if n_losses <= max(self.window, self.n_warmup_evals):
            return None
        total = state["first_loss"] - loss
        gain = recent[0] - loss
        if total > 0 and gain / total < self.threshold:
            return (
                f"loss fell {gain:.4g} over the last {self.window} evals, "
                f"{gain / total:.3g} of its total reduction {total:.4g} < threshold={self.threshold}"
            )
        return None

    def running_reason(self, state: State) -> str:
        return f"marginal loss reduction >= threshold={self.threshold}"
