"""The synthetic workload: job mix, sizes, arrivals and eval curves, from one seed.

Everything the paper leaves open is a field of :class:`WorkloadConfig`; ``docs/model.md`` says
what the presets choose and why. The generator returns public :class:`JobSpec` records (what a
platform sees) and, separately, :class:`JobTruth` records (labels and true quality) that only
the metrics read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from .._validation import check_choice, check_float, check_int
from ..detectors import Eval
from . import curves

KINDS = ("rlhf", "lora", "dpo")


@dataclass(frozen=True)
class KindShape:
    """Size and duration of one job kind: GPUs drawn from ``gpu_choices`` with ``gpu_probs``,
    duration log-normal with median ``median_hours`` and log-sd ``sigma``."""

    gpu_choices: tuple[int, ...]
    gpu_probs: tuple[float, ...]
    median_hours: float
    sigma: float


@dataclass(frozen=True)
class WorkloadConfig:
    n_jobs: int = 2000
    total_gpus: int = 64
    offered_load: float = 0.7
    rlhf_share: float = 0.8
    lora_share_of_rest: float = 0.5
    hacking_share: float = 0.6
    peak_low: float = 0.55
    peak_high: float = 0.75
    gao_gamma: float = 1.5
    evals_per_job: int = 10
    eval_noise: float = 0.03
    quality_start: tuple[float, float] = (0.2, 0.4)
    rlhf_gain: tuple[float, float] = (0.5, 0.8)
    healthy_rate: tuple[float, float] = (0.0, 1.0)
    lora_rate: tuple[float, float] = (3.0, 6.0)
    lora_gain: tuple[float, float] = (0.2, 0.4)
    dpo_rate: tuple[float, float] = (2.0, 4.0)
    dpo_gain: tuple[float, float] = (0.2, 0.4)
    dpo_plateau_from: tuple[float, float] = (0.8, 0.9)
    loss_tau: tuple[float, float] = (0.05, 0.4)
    n_tenants: int = 4
    budget_error_sigma: float = 0.3
    shapes: dict[str, KindShape] = field(
        default_factory=lambda: {
            "rlhf": KindShape((2, 4, 8), (0.3, 0.4, 0.3), 4.0, 0.6),
            "lora": KindShape((1, 2), (0.6, 0.4), 1.0, 0.6),
            "dpo": KindShape((1, 2, 4), (0.3, 0.4, 0.3), 2.0, 0.6),
        }
    )

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "n_jobs", self.n_jobs, min_value=1)
        check_int(owner, "total_gpus", self.total_gpus, min_value=1)
        check_float(owner, "offered_load", self.offered_load, low=0.0, low_open=True)
        for name in ("rlhf_share", "lora_share_of_rest", "hacking_share"):
            check_float(owner, name, getattr(self, name), low=0.0, high=1.0)
        check_float(owner, "peak_low", self.peak_low, low=0.0, high=1.0, low_open=True)
        check_float(owner, "peak_high", self.peak_high, low=self.peak_low, high=1.0)
        check_float(owner, "gao_gamma", self.gao_gamma, low=0.0, low_open=True)
        check_int(owner, "evals_per_job", self.evals_per_job, min_value=1)
        check_float(owner, "eval_noise", self.eval_noise, low=0.0)
        check_int(owner, "n_tenants", self.n_tenants, min_value=1)
        check_float(owner, "budget_error_sigma", self.budget_error_sigma, low=0.0)
        for kind, shape in self.shapes.items():
            check_choice(owner, "shapes", kind, KINDS)
            if max(shape.gpu_choices) > self.total_gpus:
                raise ValueError(
                    f"The 'shapes' parameter of {owner} asks for {max(shape.gpu_choices)} GPUs "
                    f"per {kind} job, more than total_gpus={self.total_gpus}."
                )

    def with_(self, **changes: Any) -> WorkloadConfig:
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"Unknown WorkloadConfig parameter(s): {sorted(unknown)}")
        return replace(self, **changes)


PRESETS: dict[str, WorkloadConfig] = {
    # Healthy RLHF runs keep rising (the paper's setting).
    "paper": WorkloadConfig(),
    # Healthy RLHF runs saturate and plateau as real runs do; eval noise as in real evals.
    "realistic": WorkloadConfig(healthy_rate=(4.0, 8.0), eval_noise=0.02, evals_per_job=20),
}


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What the platform knows about a job: no label, no true duration."""

    job_id: int
    tenant: int
    kind: str
    gpus: int
    arrival_s: float
    budget_s: float
    evals: tuple[Eval, ...]


@dataclass(frozen=True, slots=True)
class JobTruth:
    """What only the metrics may read."""

    hacking: bool
    duration_s: float
    peak_progress: float
    true_at_evals: tuple[float, ...]
    true_peak: float
    true_final: float


@dataclass(frozen=True)
class Workload:
    config: WorkloadConfig
    seed: int
    jobs: tuple[JobSpec, ...]
    truth: tuple[JobTruth, ...]


def generate(config: WorkloadConfig, seed: int) -> Workload:
    """Draw a workload. Each component has its own stream spawned from ``seed``."""
    s_kind, s_size, s_arrival, s_curve, s_noise = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(5)
    )
    n = config.n_jobs
    kinds = _draw_kinds(config, s_kind, n)
    hacking = (kinds == "rlhf") & (s_kind.random(n) < config.hacking_share)
    tenants = s_kind.integers(0, config.n_tenants, n)
    gpus, duration_s = _draw_sizes(config, s_size, kinds)
    budget_s = duration_s * np.exp(s_size.normal(0.0, config.budget_error_sigma, n))
    rate_per_s = config.offered_load * config.total_gpus / float(np.mean(gpus * duration_s))
    arrival_s = np.cumsum(s_arrival.exponential(1.0 / rate_per_s, n))
    p = np.arange(1, config.evals_per_job + 1) / config.evals_per_job
    jobs, truth = [], []
    for j in range(n):
        true_q, peak_p, peak_value, loss = _draw_curve(config, s_curve, str(kinds[j]), bool(hacking[j]), p)
        noisy = true_q + s_noise.normal(0.0, config.eval_noise, p.size)
        evals = tuple(
            Eval(step=i + 1, score=float(noisy[i]), progress=float(p[i]), loss=float(loss[i]))
            for i in range(p.size)
        )
        jobs.append(
            JobSpec(j, int(tenants[j]), str(kinds[j]), int(gpus[j]), float(arrival_s[j]), float(budget_s[j]), evals)
        )
        truth.append(
            JobTruth(bool(hacking[j]), float(duration_s[j]), peak_p, tuple(map(float, true_q)),
                     peak_value, float(true_q[-1]))
        )
    return Workload(config, seed, tuple(jobs), tuple(truth))


def _draw_kinds(config: WorkloadConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    rest = 1.0 - config.rlhf_share
    probs = [config.rlhf_share, rest * config.lora_share_of_rest, rest * (1 - config.lora_share_of_rest)]
    return rng.choice(np.array(KINDS), size=n, p=probs)


def _draw_sizes(config: WorkloadConfig, rng: np.random.Generator, kinds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    gpus = np.zeros(kinds.size, dtype=np.int64)
    duration_s = np.zeros(kinds.size)
    for kind in KINDS:
        mask = kinds == kind
        shape = config.shapes[kind]
        gpus[mask] = rng.choice(shape.gpu_choices, size=int(mask.sum()), p=shape.gpu_probs)
        duration_s[mask] = 3600.0 * shape.median_hours * np.exp(rng.normal(0.0, shape.sigma, int(mask.sum())))
    return gpus, duration_s


def _uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


def _draw_curve(
    config: WorkloadConfig, rng: np.random.Generator, kind: str, hacking: bool, p: np.ndarray
) -> tuple[np.ndarray, float, float, np.ndarray]:
    """True quality at ``p``, progress of the true peak, the peak value, and training loss.

    Every job draws the same number of values from ``rng`` whatever its kind, so changing one
    kind's parameters does not shift the other jobs' curves.
    """
    start = _uniform(rng, config.quality_start)
    peak = _uniform(rng, (config.peak_low, config.peak_high))
    tau = _uniform(rng, config.loss_tau)
    u_gain, u_rate, u_plateau = rng.random(3)
    if kind == "rlhf":
        gain = _lerp(config.rlhf_gain, u_gain)
        if hacking:
            shape = curves.gao_rl(p, peak, config.gao_gamma)
        else:
            shape, peak = curves.saturating(p, _lerp(config.healthy_rate, u_rate)), 1.0
    elif kind == "lora":
        gain = _lerp(config.lora_gain, u_gain)
        shape, peak = curves.saturating(p, _lerp(config.lora_rate, u_rate)), 1.0
    else:
        gain = _lerp(config.dpo_gain, u_gain)
        plateau = _lerp(config.dpo_plateau_from, u_plateau)
        shape, peak = curves.saturating_plateau(p, _lerp(config.dpo_rate, u_rate), plateau), 1.0
    return start + gain * shape, peak, start + gain, curves.training_loss(p, tau)


def _lerp(bounds: tuple[float, float], u: float) -> float:
    return bounds[0] + (bounds[1] - bounds[0]) * float(u)
