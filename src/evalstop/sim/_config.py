"""The simulator's configuration, its time tolerance, and the error a broken invariant raises
(re-exported by ``cluster``, where they are used)."""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import check_choice, check_float

#: Events due within this relative distance of an instant (seconds below 1 s) happen at it:
#: about 5,000 times float64's relative spacing (2.2e-16), so round-off from the few operations
#: behind an event time is covered, and small enough that the GPU-time accounting stays exact
#: to 1e-9 relative (the simulator's invariant tests hold it to that).
TIME_TOL_S = 1e-12


class SimulationInvariantError(RuntimeError):
    """A broken simulator invariant: a bug, never bad input."""


@dataclass(frozen=True)
class SimConfig:
    preempt_overhead_s: float = 120.0
    #: "fast": the kill point is computed from each job's own eval sequence at arrival (valid
    #: because a stopping rule only reads that sequence); "events": one event per eval.
    eval_path: str = "fast"
    #: The oracle stops each hacking job at its best true checkpoint (upper bound, sim only).
    oracle: bool = False
    #: Minimum run quantum: a resumed job cannot be preempted again until it has finished its
    #: restore and then run this many seconds (0: no quantum; see docs/model.md).
    min_run_s: float = 0.0
    #: GPU time of one eval on the job's own GPUs, as a fraction of the training time between
    #: two of its eval opportunities (0: evals are free, as in the paper; docs/model.md).
    eval_cost: float = 0.0

    def __post_init__(self) -> None:
        check_float("SimConfig", "preempt_overhead_s", self.preempt_overhead_s, low=0.0)
        check_float("SimConfig", "min_run_s", self.min_run_s, low=0.0)
        check_float("SimConfig", "eval_cost", self.eval_cost, low=0.0)
        check_choice("SimConfig", "eval_path", self.eval_path, ("fast", "events"))
