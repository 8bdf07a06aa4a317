"""The testbed's seeded workload: Poisson arrivals and a mix of RL and supervised runs.

Every kind trains the log-linear policy of :mod:`evalstop.workloads.rl_toy`, differing in what
it optimises:

- ``hack``: REINFORCE against the learned proxy reward, with a step size large enough to find
  what the proxy over-rates (gold rises, then falls);
- ``healthy``: REINFORCE against gold itself (the control family of the curve bank; gold keeps
  rising);
- ``sft``: supervised fine-tuning on demonstrations (:mod:`.sft`; gold rises and plateaus);
- ``grpo-proxy`` / ``grpo-gold``: tiny TRL GRPO runs (:mod:`.grpo`; a one-layer GPT-2 policy
  against the learned proxy, or gold), off by default (``grpo_share=0``), with their own
  number of steps and evals (``GRPO_STEPS``, ``GRPO_EVALS``) and no step pacing.

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
from .grpo import GRPO_EVALS, GRPO_STEPS

KINDS = ("hack", "healthy", "sft", "grpo-proxy", "grpo-gold")

#: ToyConfig changes per kind (on top of the curve bank's BASE); for ``sft``, ``lr`` is the
#: step size of the supervised gradient.
KIND_CONFIG: dict[str, dict[str, Any]] = {
    "hack": {"lr": 1.0, "label_bias": 5.0},
    "healthy": {"lr": 1.0, "label_bias": 5.0, "target": "gold"},
    "sft": {"lr": 0.2, "label_bias": 5.0},
}


@dataclass(frozen=True)
class WorkloadSpec:
    """How many jobs, how they arrive, what they are. ``hack_share`` and ``sft_share`` are shares
    of the whole trace (proxy-trained RL and supervised fine-tuning jobs); the rest are
    gold-trained RL jobs. ``step_time_s`` is the wall time of one training step (the numpy step
    is padded to it: the stand-in for an accelerator step, so that durations do not depend on how
    loaded the CPU is)."""

    n_jobs: int = 8
    seed: int = 0
    mean_interarrival_s: float = 2.0
    hack_share: float = 0.5
    sft_share: float = 0.2
    grpo_share: float = 0.0
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
        check_float(owner, "sft_share", self.sft_share, low=0.0, high=1.0)
        check_float(owner, "grpo_share", self.grpo_share, low=0.0, high=1.0)
        if self.hack_share + self.sft_share > 1.0:
            raise ValueError(
                f"The 'sft_share' parameter of {owner} must be <= 1 - hack_share "
                f"({1.0 - self.hack_share:.4g}). Got {self.sft_share!r} instead."
            )
        if self.hack_share + self.sft_share + self.grpo_share > 1.0:
            raise ValueError(
                f"The 'grpo_share' parameter of {owner} must be <= 1 - hack_share - sft_share "
                f"({1.0 - self.hack_share - self.sft_share:.4g}). Got {self.grpo_share!r} instead."
            )
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
    n_sft = min(round(spec.sft_share * spec.n_jobs), spec.n_jobs - n_hack)
    n_grpo = min(round(spec.grpo_share * spec.n_jobs), spec.n_jobs - n_hack - n_sft)
    n_healthy = spec.n_jobs - n_hack - n_sft - n_grpo
    grpo = ["grpo-proxy"] * (n_grpo - n_grpo // 2) + ["grpo-gold"] * (n_grpo // 2)
    kinds = np.array(["hack"] * n_hack + ["sft"] * n_sft + grpo + ["healthy"] * n_healthy)
    kinds_rng.shuffle(kinds)
    seeds = seeds_rng.integers(0, 2**31 - 1, size=spec.n_jobs)
    widths = widths_rng.integers(1, spec.max_slots + 1, size=spec.n_jobs)
    return [
        _job(spec, i, str(kinds[i]), float(arrivals[i]), int(seeds[i]), int(widths[i]))
        for i in range(spec.n_jobs)
    ]


def _job(spec: WorkloadSpec, i: int, kind: str, arrival_s: float, seed: int, width: int) -> JobPlan:
    name, arrival = f"job-{i:03d}", round(arrival_s, 3)
    if kind.startswith("grpo"):  # a real torch run: its own size, no pacing
        return JobPlan(name, kind, arrival, seed, GRPO_STEPS, GRPO_EVALS, 0.0, width)
    return JobPlan(name, kind, arrival, seed, spec.n_steps, spec.n_evals, spec.step_time_s, width)
