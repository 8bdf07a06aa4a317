"""The testbed's seeded workload: Poisson arrivals and a mix of hacking and healthy RL runs.

Both kinds are the policy-gradient runs of :mod:`evalstop.workloads.rl_toy` (a log-linear
policy trained by REINFORCE), differing only in what they optimise:

- ``hack``: the learned proxy reward, with a step size large enough to find what the proxy
  over-rates (gold rises, then falls);
- ``healthy``: gold itself (the control family of the curve bank; gold keeps rising).

A job takes 1 to ``max_slots`` slots (drawn uniformly from its own seeded stream; 1 for every job
by default). A wider job holds its slots for its whole run; its training is the same (the
stand-in for a job whose size grows with its width), so width changes only what it occupies.

The label used as ground truth is not the kind: it is computed from each job's measured gold
curve with the curve bank's rule (:func:`evalstop.workloads.bank.label_curve`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .._validation import check_float, check_int

KINDS = ("hack", "healthy")

#: ToyConfig changes per kind (on top of the curve bank's BASE).
KIND_CONFIG: dict[str, dict[str, Any]] = {
    "hack": {"lr": 1.0, "label_bias": 5.0},
    "healthy": {"lr": 1.0, "label_bias": 5.0, "target": "gold"},
}


@dataclass(frozen=True)
class WorkloadSpec:
    """How many jobs, how they arrive, what they are. ``step_time_s`` is the wall time of one
    training step (the numpy step is padded to it: the stand-in for an accelerator step, so that
    durations do not depend on how loaded the CPU is)."""

    n_jobs: int = 8
    seed: int = 0
    mean_interarrival_s: float = 2.0
    hack_share: float = 0.5
    n_steps: int = 150
    n_evals: int = 15
    step_time_s: float = 0.06
    max_slots: int = 1

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "n_jobs", self.n_jobs, min_value=1)
        check_int(owner, "seed", self.seed, min_value=0)
        check_float(owner, "mean_interarrival_s", self.mean_interarrival_s, low=0.0)
        check_float(owner, "hack_share", self.hack_share, low=0.0, high=1.0)
        check_int(owner, "n_steps", self.n_steps, min_value=1)
        check_int(owner, "n_evals", self.n_evals, min_value=1)
        check_float(owner, "step_time_s", self.step_time_s, low=0.0)
        check_int(owner, "max_slots", self.max_slots, min_value=1)


@dataclass(frozen=True)
class JobPlan:
    """One job of the trace: what to train, with which seed, arriving when (seconds after start)."""

    name: str
    kind: str
    arrival_s: float
    seed: int
    n_steps: int
    n_evals: int
    step_time_s: float
    slots: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobPlan:
        return cls(**data)


def make_plan(spec: WorkloadSpec) -> list[JobPlan]:
    """The trace: deterministic in ``spec.seed`` (streams: arrivals, kinds, job seeds, widths;
    the first three are those of a one-slot trace, so ``max_slots=1`` leaves a trace unchanged)."""
    arrivals_rng, kinds_rng, seeds_rng, widths_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(spec.seed).spawn(4)
    )
    gaps = arrivals_rng.exponential(spec.mean_interarrival_s, size=spec.n_jobs)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    n_hack = round(spec.hack_share * spec.n_jobs)
    kinds = np.array(["hack"] * n_hack + ["healthy"] * (spec.n_jobs - n_hack))
    kinds_rng.shuffle(kinds)
    seeds = seeds_rng.integers(0, 2**31 - 1, size=spec.n_jobs)
    widths = widths_rng.integers(1, spec.max_slots + 1, size=spec.n_jobs)
    return [
        JobPlan(
            f"job-{i:03d}",
            str(kinds[i]),
            round(float(arrivals[i]), 3),
            int(seeds[i]),
            spec.n_steps,
            spec.n_evals,
            spec.step_time_s,
            int(widths[i]),
        )
        for i in range(spec.n_jobs)
    ]
