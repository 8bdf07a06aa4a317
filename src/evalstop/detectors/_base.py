"""The detector contract: frozen parameters plus one decision method.

A detector never holds per-job state. It is handed the job's eval history so far and answers
with a Verdict: whether the rule has fired, at which eval, why, and which eval was best. The
same object therefore runs unchanged in the simulator, the replay tool and the service.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Decision(StrEnum):
    CONTINUE = "continue"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Eval:
    """One evaluation of a job: what a platform can see, and nothing more.

    ``score`` is the watched eval metric, ``progress`` the fraction of the job's budget done
    (0..1, if known), ``loss`` the training loss at that point (if reported).
    """

    step: int
    score: float
    progress: float | None = None
    loss: float | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """A detector's answer for one eval history.

    ``stop_index``/``stop_step`` are the eval at which the rule *first* fired (None if it has
    not). ``best_*`` describe the best valid eval seen up to that point: the checkpoint to
    deliver. ``n_invalid`` counts NaN/inf scores that were skipped.
    """

    decision: Decision
    reason: str
    stop_index: int | None = None
    stop_step: int | None = None
    best_index: int | None = None
    best_step: int | None = None
    best_score: float | None = None
    n_invalid: int = 0

    @property
    def stopped(self) -> bool:
        return self.decision is Decision.STOP


def is_valid(score: float | None) -> bool:
    return score is not None and math.isfinite(score)


class Detector(ABC):
    """A stopping rule. Subclasses are frozen dataclasses of parameters."""

    #: Name used in detector specs (``evalstop:k=3``).
    name: str = ""

    @abstractmethod
    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        """Scan ``evals`` (in step order) and return the verdict at the first eval where the
        rule fires, or a CONTINUE verdict over the whole history.

        Only the prefix up to the returned ``stop_index`` influenced the decision, so calling
        this on every prefix and on the full history agree. A non-finite score never makes a
        rule fire by itself.
        """


class BestTracker:
    """Running best of the valid scores seen so far (a helper for ``evaluate`` loops)."""

    __slots__ = ("index", "n_invalid", "score", "sign", "step")

    def __init__(self, mode: str) -> None:
        self.sign = 1.0 if mode == "max" else -1.0
        self.index: int | None = None
        self.step: int | None = None
        self.score: float | None = None
        self.n_invalid = 0

    def better(self, score: float, than: float, min_delta: float = 0.0) -> bool:
        return self.sign * (score - than) > min_delta

    def offer(self, i: int, ev: Eval) -> bool:
        """Record ``ev``; return True if it is the new best (strictly better)."""
        if self.score is None or self.better(ev.score, self.score):
            self.index, self.step, self.score = i, ev.step, ev.score
            return True
        return False

    def verdict(self, decision: Decision, reason: str, stop_at: tuple[int, int] | None = None) -> Verdict:
        return Verdict(
            decision=decision,
            reason=reason,
            stop_index=None if stop_at is None else stop_at[0],
            stop_step=None if stop_at is None else stop_at[1],
            best_index=self.index,
            best_step=self.step,
            best_score=self.score,
            n_invalid=self.n_invalid,
        )
