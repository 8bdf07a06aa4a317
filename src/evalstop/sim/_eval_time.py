"""Evals that cost GPU time, and a cadence that runs only some of them: one job's timeline in
attained service.

Without either (``SimConfig.eval_cost`` 0 and a dense cadence) a job's eval at progress ``p``
happens when its attained service reaches ``p * duration_s`` and takes no time; this module is
not used. With either, at the job's arrival:

- the evals run are those its monitor's cadence policy asks for (``Monitor.next_eval``), fed to
  the rule in order up to its stop; a job no rule watches runs every eval it has. Which evals a
  policy asks for depends only on the job's own scores (through the rule's state), so, like the
  fast path's kill plan, it is known at arrival;
- each eval run holds the job's GPUs for ``cost_s`` = ``eval_cost`` x the training time between
  two eval opportunities (``duration_s / n_evals``). The ``k``-th eval run (1-based) at progress
  ``p`` ends, and its verdict is known, at attained service ``p * duration_s + k * cost_s``; the
  job completes at ``duration_s + n_run * cost_s``. A kill happens at the end of the eval the rule
  fired on, so the eval time a job spent is ``cost_s`` times the evals it ran.

Everything here is scalar Python float arithmetic in a fixed order (no numpy kernel), so it is
the same on every CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from ..detectors import CadenceWalk, Eval, Every, Monitor
from ._job import eval_target_s

DENSE = Every(1)


@dataclass(frozen=True, slots=True)
class Timeline:
    """``used``: dense indices of the evals run, in order; ``ends``: attained service (s) at the
    end of each; ``duration_s``: attained service at completion; ``cost_s``: one eval's time;
    ``stop``: the dense index of the eval the rule fired on (None: no stop) and ``best`` the
    dense index of the eval it delivers then (-1: the final checkpoint)."""

    used: tuple[int, ...]
    ends: tuple[float, ...]
    duration_s: float
    cost_s: float
    stop: int | None = None
    best: int = -1

    @property
    def eval_s(self) -> float:
        """Eval time (s) spent by the job's end, its kill or its completion (a stop is the last
        eval run)."""
        return self.cost_s * len(self.used)


def eval_cost_s(eval_cost: float, duration_s: float, n_evals: int) -> float:
    """GPU time (s, on each of the job's GPUs) of one eval: ``eval_cost`` x the training time
    between two eval opportunities."""
    return eval_cost * duration_s / n_evals if n_evals else 0.0


def run_cadence(monitor: Monitor, evals: Sequence[Eval]) -> tuple[list[int], list[int]]:
    """Feed ``monitor`` the evals its cadence asks for, up to its stop (``CadenceWalk``);
    return (indices run, indices the rule folded in: a repeated step is run but ignored)."""
    used: list[int] = []
    folded: list[int] = []
    accepts = monitor.accepts
    for index in CadenceWalk(monitor).walk(evals):
        if accepts(evals[index].step):
            folded.append(index)
        used.append(index)
    return used, folded


def timeline(
    evals: Sequence[Eval],
    duration_s: float,
    eval_cost: float,
    monitor: Monitor | None,
    oracle_stop: tuple[int, int] | None = None,
) -> Timeline:
    """The job's timeline under ``monitor`` (None: every eval is run, nothing stops it) or, for
    the oracle, its (stop, best) dense indices (every eval run up to the stop)."""
    cost = eval_cost_s(eval_cost, duration_s, len(evals))
    stop: int | None = None
    best = -1
    if oracle_stop is not None:
        stop, best = oracle_stop
        used = list(range(stop + 1))
    elif monitor is None:
        used = list(range(len(evals)))
    elif monitor.cadence == DENSE and _ascending(evals):
        # Every eval, each folded in (no repeated step): ``Monitor.fold``, the fast path's loop.
        fired = monitor.fold(evals)
        verdict = monitor.verdict if fired else None
        if verdict is not None and verdict.stop_index is not None:
            stop = verdict.stop_index
            best = -1 if verdict.best_index is None else verdict.best_index
        used = list(range(len(evals) if stop is None else stop + 1))
    else:
        used, folded = run_cadence(monitor, evals)
        verdict = monitor.verdict
        if monitor.fired and verdict.stop_index is not None:
            stop = folded[verdict.stop_index]
            best = -1 if verdict.best_index is None else folded[verdict.best_index]
    ends = tuple(eval_target_s(duration_s, evals[i].progress) + k * cost for k, i in enumerate(used, start=1))
    return Timeline(tuple(used), ends, duration_s + len(used) * cost, cost, stop, best)


def _ascending(evals: Sequence[Eval]) -> bool:
    """Whether every eval's step is above the one before (then the rule folds each one in)."""
    return all(a.step < b.step for a, b in pairwise(evals))
