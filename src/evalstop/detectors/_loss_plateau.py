"""Competitor: stop when the training loss stops improving (a loss-plateau rule)."""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import MAX_COUNT, check_choice, check_float, check_int
from ._base import Detector, Eval, State, finite_loss, track_best


@dataclass(frozen=True)
class LossPlateau(Detector):
    """Stop after ``patience`` consecutive evals whose training loss does not improve on the
    reference minimum by more than ``min_rel_delta`` (relative to ``|minimum|``).

    The reference minimum moves only on such a significant improvement (as in PyTorch's
    ``ReduceLROnPlateau``), so a slow, steady decline still resets the count once it adds up.
    The first ``n_warmup_evals`` valid losses set the reference but never count as stale.
    Only ``Eval.loss`` drives the rule; the score only chooses the best checkpoint. Missing or
    non-finite losses are skipped: they neither count nor reset.
    """

    patience: int = 3
    min_rel_delta: float = 0.01
    n_warmup_evals: int = 2
    mode: str = "max"
    name = "loss-plateau"
    reads = ("loss",)

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "patience", self.patience, min_value=1, max_value=MAX_COUNT)
        check_float(owner, "min_rel_delta", self.min_rel_delta, low=0.0, high=1.0)
        check_int(owner, "n_warmup_evals", self.n_warmup_evals, min_value=0, max_value=MAX_COUNT)
        check_choice(owner, "mode", self.mode, ("max", "min"))

    def rule_state(self) -> State:
        return {"reference": None, "n_valid": 0, "run": 0}

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        track_best(state, self.mode, index, ev)
        loss = finite_loss(ev)
        if loss is None:
            return None
        n_valid = state["n_valid"] = state["n_valid"] + 1
        reference = state["reference"]
        if reference is None or loss < reference - self.min_rel_delta * abs(reference):
            state["reference"], state["run"] = loss, 0
            return None
        run = state["run"] = state["run"] + 1 if n_valid > self.n_warmup_evals else 0
        if run >= self.patience:
            return (
                f"training loss has not improved on {reference:.4g} by more than "
                f"{self.min_rel_delta:.3g} (relative) for {run} evals (patience={self.patience})"
            )
        return None

    def running_reason(self, state: State) -> str:
        return f"{state['run']} stale evals < patience={self.patience}"
