"""The detector contract: frozen parameters plus an incremental decision.

A detector never holds per-job state. The state lives with the caller: ``start()`` makes a
fresh one and ``update(state, ev)`` folds in the next eval, returning a new state and the
Verdict so far (whether the rule has fired, at which eval, why, and which eval was best). The
state is a small dict of JSON values (str keys; int, float, str, None and lists of them; never
NaN or inf), so a service can persist it and a training callback can save it in a checkpoint;
its size is bounded by the rule's ``state_window``, whatever the length of the history.
``evaluate(evals)`` is the fold of ``update`` over a whole history. The same object therefore
runs unchanged in the simulator, the replay tool, the service and the callbacks.

A rule implements ``step`` (fold one eval into a state it may change in place and return a stop
reason when it fires there) plus ``rule_state`` (its own initial keys) and ``running_reason``
(the reason of a CONTINUE verdict). Once a rule has fired its state is final: later evals
change nothing, so the verdict keeps naming the first eval at which it fired.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

#: A rule's per-job state: JSON values only (see the module docstring).
State = dict[str, Any]


class Decision(StrEnum):
    CONTINUE = "continue"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Eval:
    """One evaluation of a job: what a platform can see, and nothing more.

    ``score`` is the watched eval metric, ``progress`` the fraction of the job's budget done
    (0..1, if known), ``loss`` the training loss at that point (if reported), ``stderr`` the
    score's standard error (if known: e.g. the sd of per-prompt scores over sqrt(n)).
    """

    step: int
    score: float
    progress: float | None = None
    loss: float | None = None
    stderr: float | None = None


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


@dataclass(frozen=True, slots=True)
class RuleEvidence:
    """What a rule's state says, for drawing and for clients (``Detector.evidence``).

    ``statistic`` is how far the rule has gone towards a stop (0: nothing counts against the
    run), ``limit`` the value at which it fires (None when it has no single one), ``label`` what
    the statistic is. ``band`` is the score the *next* eval is compared against, on the score
    axis (None when the rule's threshold is not on it), ``band_label`` what that line is.
    """

    statistic: float
    limit: float | None
    label: str
    band: float | None = None
    band_label: str = ""


def is_valid(score: float | None) -> bool:
    return score is not None and math.isfinite(score)


def copy_state(state: State) -> State:
    """A copy of ``state`` that shares nothing mutable with it (its lists are copied)."""
    return {key: value.copy() if type(value) is list else value for key, value in state.items()}


class Detector(ABC):
    """A stopping rule. Subclasses are frozen dataclasses of parameters."""

    #: Name used in detector specs (``evalstop:k=3``).
    name: str = ""
    #: Constructor parameters that size the state or the work per eval (mann-kendall's
    #: ``max_window``): a service bounds each one (``rule_max_window``, docs/service.md).
    size_params: ClassVar[tuple[str, ...]] = ()
    #: The optional fields of an eval the rule cannot decide without (``progress``, ``loss``,
    #: ``items``): a source of evals must carry them (``evalstop replay`` refuses a curves file
    #: without such a column). The score and step every rule reads are not listed.
    reads: ClassVar[tuple[str, ...]] = ()

    @property
    def state_window(self) -> int:
        """The most per-eval values the state ever holds (0: a fixed set of scalars only)."""
        return 0

    # -- the incremental protocol ----------------------------------------------------------
    def start(self) -> State:
        """The state before the first eval."""
        state: State = {
            "n": 0, "n_invalid": 0, "best_index": None, "best_step": None, "best_score": None,
            "stop": None,
        }
        state.update(self.rule_state())
        return state

    def update(self, state: State, ev: Eval) -> tuple[State, Verdict]:
        """Fold ``ev`` (the next eval, in step order) into a copy of ``state``; return the new
        state and the verdict over every eval folded so far. ``state`` itself is not changed."""
        new = copy_state(state)
        self.advance(new, ev)
        return new, self.verdict(new)

    def advance(self, state: State, ev: Eval) -> bool:
        """``update`` in place, for callers that own ``state`` (``evaluate``, ``Monitor``).
        Returns whether the rule has fired (at ``ev`` or before it)."""
        if state["stop"] is not None:
            return True
        index = state["n"]
        state["n"] = index + 1
        reason = self.step(state, index, ev)
        if reason is None:
            return False
        state["stop"] = [index, ev.step, reason]
        return True

    def verdict(self, state: State) -> Verdict:
        """The verdict that ``state`` stands for."""
        stop = state["stop"]
        if stop is None:
            decision, stop_index, stop_step = Decision.CONTINUE, None, None
            reason = self.running_reason(state)
        else:
            stop_index, stop_step, reason = stop
            decision = Decision.STOP
        return Verdict(
            decision, reason, stop_index, stop_step,
            state["best_index"], state["best_step"], state["best_score"], state["n_invalid"],
        )

    def evaluate(self, evals: Sequence[Eval]) -> Verdict:
        """The fold of ``update`` over ``evals`` (in step order): the verdict at the first eval
        where the rule fires, or a CONTINUE verdict over the whole history. Calling it on every
        prefix and on the full history agree. A non-finite score never makes a rule fire."""
        state = self.start()
        step = self.step
        for index, ev in enumerate(evals):  # ``advance`` inlined: the simulator's hot loop
            state["n"] = index + 1
            reason = step(state, index, ev)
            if reason is not None:
                state["stop"] = [index, ev.step, reason]
                break
        return self.verdict(state)

    # -- what a rule implements ------------------------------------------------------------
    def rule_state(self) -> State:
        """The rule's own keys of a fresh state (added to the shared ``n``/``best_*`` keys)."""
        return {}

    @abstractmethod
    def step(self, state: State, index: int, ev: Eval) -> str | None:
        """Fold eval number ``index`` into ``state`` in place (tracking the best with ``offer``
        and counting skipped scores in ``n_invalid``); return the stop reason if the rule fires
        at this eval. The caller maintains ``n`` and ``stop`` (a step never reads them)."""

    def running_reason(self, state: State) -> str:
        """Why a state that has not fired says CONTINUE."""
        return "has not fired"

    def evidence(self, state: State) -> RuleEvidence:
        """What ``state`` says (O(1) or O(window)). By default: the evals since the running
        best, no band. A rule with a statistic of its own or a line on the score axis says so."""
        n: int = state["n"]
        best = state["best_index"]
        since = 0 if best is None else n - 1 - best
        return RuleEvidence(float(since), None, "evals since the best")

    def elevated(self, state: State) -> bool:
        """Whether the evidence in ``state`` is elevated: a decline may have started, so an
        adaptive cadence asks for the next eval soon. By default: the latest eval is not the
        running best (it is below it, or invalid). A rule may say more (its statistic is up)."""
        n: int = state["n"]
        return n > 0 and state["best_index"] != n - 1

    def fold_rows(self, scores: Any) -> tuple[Any, Any] | None:
        """Optional: ``evaluate`` over every row of a (jobs x evals) float score matrix at once,
        as two int arrays (index of the eval where the rule fires or -1, index of the best valid
        eval up to there or -1). None: this rule has no batch form (the simulator then folds a
        ``Monitor`` per job). A rule that has one must agree with ``evaluate`` exactly."""
        return None


def offer(state: State, sign: float, index: int, ev: Eval) -> bool:
    """Record the valid eval ``ev`` as the best if it is strictly better (``sign`` is 1 for
    mode max, -1 for min); return whether it is the new best."""
    best = state["best_score"]
    if best is None or sign * (ev.score - best) > 0.0:
        state["best_index"], state["best_step"], state["best_score"] = index, ev.step, ev.score
        return True
    return False


def sign_of(mode: str) -> float:
    return 1.0 if mode == "max" else -1.0


def track_best(state: State, mode: str, index: int, ev: Eval) -> None:
    """For rules that never look at the score: keep the best checkpoint, count invalid scores."""
    if is_valid(ev.score):
        offer(state, sign_of(mode), index, ev)
    else:
        state["n_invalid"] += 1


def finite_loss(ev: Eval) -> float | None:
    """The eval's training loss if it is reported and finite, else None."""
    loss = ev.loss
    return loss if loss is not None and math.isfinite(loss) else None
