"""Patience on the best value, with Keras / Hugging Face ``EarlyStoppingCallback`` semantics."""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import MAX_COUNT, MAX_SCALE, check_choice, check_float, check_int
from ._base import Detector, Eval, RuleEvidence, State, is_valid, offer, sign_of


@dataclass(frozen=True)
class Patience(Detector):
    """Stop once ``patience`` valid evals in a row fail to improve on the best by more than
    ``min_delta``.

    This is Hugging Face's ``EarlyStoppingCallback`` (``early_stopping_patience``,
    ``early_stopping_threshold`` = ``min_delta``, ``greater_is_better`` = ``mode == "max"``):
    an eval resets the count when it beats the best so far by more than ``min_delta``, and any
    strict improvement, however small, becomes the new best (the Trainer's ``best_metric``).
    Keras differs only when ``min_delta > 0``: there the best moves only on a significant
    improvement. Error control: none beyond ``min_delta``; on a noisy plateau the chance of
    ``patience`` non-improvements in a row is high, so choose ``min_delta`` above the noise.
    NaN/inf scores are skipped (Hugging Face would count them as non-improvements).
    """

    patience: int = 3
    min_delta: float = 0.0
    mode: str = "max"
    name = "patience"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "patience", self.patience, min_value=1, max_value=MAX_COUNT)
        check_float(owner, "min_delta", self.min_delta, low=0.0, high=MAX_SCALE)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def rule_state(self) -> State:
        return {"wait": 0}

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        if not is_valid(ev.score):
            state["n_invalid"] += 1
            return None
        sign = sign_of(self.mode)
        best = state["best_score"]
        improved = best is None or sign * (ev.score - best) > self.min_delta
        wait = state["wait"] = 0 if improved else state["wait"] + 1
        offer(state, sign, index, ev)
        if wait >= self.patience:
            best = state["best_score"]
            return f"no improvement on {best:.4g} by more than {self.min_delta} for {wait} evals"
        return None

    def evidence(self, state: State) -> RuleEvidence:
        best = state["best_score"]
        band = None if best is None else best + sign_of(self.mode) * self.min_delta
        return RuleEvidence(float(state["wait"]), float(self.patience), "evals without improvement", band,
                            "to beat (best + min_delta)")

    def running_reason(self, state: State) -> str:
        return f"{state['wait']} evals without improvement < patience={self.patience}"
