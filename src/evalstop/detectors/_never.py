"""The null detector: baselines take the same code path and never stop."""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import check_choice
from ._base import Detector, Eval, State, track_best


@dataclass(frozen=True)
class NeverStop(Detector):
    """Never fires; still tracks the best eval so callers can report it."""

    mode: str = "max"
    name = "never"

    def __post_init__(self) -> None:
        check_choice(type(self).__name__, "mode", self.mode, ("max", "min"))

    def step(self, state: State, index: int, ev: Eval) -> str | None:
        track_best(state, self.mode, index, ev)
        return None

    def running_reason(self, state: State) -> str:
        return "never stops"
