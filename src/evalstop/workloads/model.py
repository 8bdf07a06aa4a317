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

from .. import _snap
from .._gc import cyclic_gc_paused
from .._validation import InvalidParameterError, check_choice, check_float, check_int
from . import curves
from .records import JobSpec, JobTruth
from .table import DenseEvals, JobTable

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
            _check_shape(self, kind, shape)
        missing = sorted(set(KINDS) - set(self.shapes))
        if missing:
            raise InvalidParameterError(
                f"The 'shapes' parameter of {owner} must give a KindShape for every kind "
                f"{list(KINDS)}. Missing {missing}."
            )
        for name, low in _RANGES.items():
            _check_range(owner, name, getattr(self, name), low)

    def with_(self, **changes: Any) -> WorkloadConfig:
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"Unknown WorkloadConfig parameter(s): {sorted(unknown)}")
        return replace(self, **changes)


#: (low, high) range parameters and the smallest value their low end may take (exclusive).
_RANGES = {
    "quality_start": -1e-12,
    "rlhf_gain": -1e-12,
    "healthy_rate": -1e-12,
    "lora_rate": -1e-12,
    "lora_gain": -1e-12,
    "dpo_rate": -1e-12,
    "dpo_gain": -1e-12,
    "dpo_plateau_from": 0.0,
    "loss_tau": 0.0,
}


def _check_range(owner: str, name: str, value: Any, low: float) -> None:
    ok = isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)
    if ok:
        ok = low < value[0] <= value[1] and np.isfinite(value[1])
    if not ok:
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be a (low, high) pair with "
            f"{max(low, 0.0):g} {'<' if low >= 0 else '<='} low <= high. Got {value!r} instead."
        )


def _check_shape(config: WorkloadConfig, kind: str, shape: KindShape) -> None:
    owner = type(config).__name__
    problem = ""
    if not shape.gpu_choices or any(not isinstance(g, int) or g < 1 for g in shape.gpu_choices):
        problem = f"for {kind}: GPU choices must be ints >= 1"
    elif len(shape.gpu_probs) != len(shape.gpu_choices) or any(q < 0 for q in shape.gpu_probs):
        problem = f"for {kind}: needs one non-negative probability per GPU choice"
    elif abs(sum(shape.gpu_probs) - 1.0) > 1e-9:
        problem = f"for {kind}: GPU probabilities sum to {sum(shape.gpu_probs):g}, not 1"
    elif not (shape.median_hours > 0 and np.isfinite(shape.median_hours)) or not shape.sigma >= 0:
        problem = f"for {kind}: median_hours must be > 0 and sigma >= 0"
    if problem:
        raise InvalidParameterError(f"The 'shapes' parameter of {owner} {problem}. Got {shape!r} instead.")


def check_shapes_fit(config: WorkloadConfig) -> None:
    """Raise if a job drawn from ``config.shapes`` could be wider than the cluster. Checked where
    sizes are drawn from the shapes (:func:`generate`, and the configs that will call it), not in
    :class:`WorkloadConfig` itself: a ``jobs.csv`` or Philly trace brings its own sizes, so a small
    cluster must not be refused for the synthetic shapes it never draws from."""
    for kind, shape in config.shapes.items():
        if max(shape.gpu_choices) > config.total_gpus:
            raise InvalidParameterError(
                f"The 'shapes' parameter of {type(config).__name__} asks for {max(shape.gpu_choices)} GPUs "
                f"per {kind} job, more than total_gpus={config.total_gpus}. Got {shape!r} instead."
            )


PRESETS: dict[str, WorkloadConfig] = {
    # Healthy RLHF runs keep rising (the paper's setting).
    "paper": WorkloadConfig(),
    # Healthy RLHF runs saturate and plateau as real runs do; eval noise as in real evals.
    "realistic": WorkloadConfig(healthy_rate=(4.0, 8.0), eval_noise=0.02, evals_per_job=20),
}


class Workload:
    """A drawn workload: ``config``, ``seed``, and its jobs, as records (``jobs`` and ``truth``,
    one :class:`JobSpec` and :class:`JobTruth` per job) or as columns (``table``, a
    :class:`JobTable`). Give either; the other is built from it the first time it is read, so a
    large generated workload never holds one object per eval unless asked to."""

    __slots__ = ("_jobs", "_table", "_truth", "config", "seed")

    def __init__(
        self,
        config: WorkloadConfig,
        seed: int,
        jobs: tuple[JobSpec, ...] | None = None,
        truth: tuple[JobTruth, ...] | None = None,
        *,
        table: JobTable | None = None,
    ) -> None:
        if table is None and (jobs is None or truth is None):
            raise TypeError("Workload needs jobs and truth records, or a table.")
        self.config, self.seed = config, seed
        self._jobs, self._truth, self._table = jobs, truth, table

    @property
    def jobs(self) -> tuple[JobSpec, ...]:
        if self._jobs is None:
            self._materialize()
        assert self._jobs is not None
        return self._jobs

    @property
    def truth(self) -> tuple[JobTruth, ...]:
        if self._truth is None:
            self._materialize()
        assert self._truth is not None
        return self._truth

    @property
    def table(self) -> JobTable:
        if self._table is None:
            self._table = JobTable.from_records(self.jobs, self.truth)
        return self._table

    def __len__(self) -> int:
        return len(self._jobs) if self._jobs is not None else len(self.table)

    def _materialize(self) -> None:
        with cyclic_gc_paused():
            self._jobs, self._truth = self.table.records()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Workload):
            return NotImplemented
        mine = (self.config, self.seed, self.jobs, self.truth)
        return mine == (other.config, other.seed, other.jobs, other.truth)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Workload(n_jobs={len(self)}, seed={self.seed}, config={self.config!r})"


def generate(config: WorkloadConfig, seed: int) -> Workload:
    """Draw a workload. Each component has its own stream spawned from ``seed``."""
    check_shapes_fit(config)
    s_kind, s_size, s_arrival, s_curve, s_noise = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(5)
    )
    n = config.n_jobs
    kinds = _draw_kinds(config, s_kind, n)
    hacking = (kinds == "rlhf") & (s_kind.random(n) < config.hacking_share)
    tenants = s_kind.integers(0, config.n_tenants, n)
    gpus, duration_s = _draw_sizes(config, s_size, kinds)
    budget_s = duration_s * _snap.exp(s_size.normal(0.0, config.budget_error_sigma, n))
    rate_per_s = config.offered_load * config.total_gpus / float(np.mean(gpus * duration_s))
    arrival_s = np.cumsum(s_arrival.exponential(1.0 / rate_per_s, n))
    columns = JobColumns(kinds, hacking, tenants, gpus, duration_s, budget_s, arrival_s)
    return build_workload(config, seed, columns, s_curve, s_noise)


def _draw_kinds(config: WorkloadConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    rest = 1.0 - config.rlhf_share
    probs = [config.rlhf_share, rest * config.lora_share_of_rest, rest * (1 - config.lora_share_of_rest)]
    return rng.choice(np.array(KINDS), size=n, p=probs)


def _draw_sizes(
    config: WorkloadConfig, rng: np.random.Generator, kinds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    gpus = np.zeros(kinds.size, dtype=np.int64)
    duration_s = np.zeros(kinds.size)
    for kind in KINDS:
        mask = kinds == kind
        shape = config.shapes[kind]
        count = int(mask.sum())
        gpus[mask] = rng.choice(shape.gpu_choices, size=count, p=shape.gpu_probs)
        duration_s[mask] = 3600.0 * shape.median_hours * _snap.exp(rng.normal(0.0, shape.sigma, count))
    return gpus, duration_s


# -- from drawn columns to records -----------------------------------------------------------
#: Jobs built per batch: enough to amortise each numpy call, few enough that a batch's arrays
#: stay small next to the records they become.
_BATCH = 4096


@dataclass(frozen=True)
class JobColumns:
    """What is drawn per job before its curves, one entry per job (job id = position). The
    constructor converts each column to the type of its record field."""

    kinds: np.ndarray
    hacking: np.ndarray
    tenants: np.ndarray
    gpus: np.ndarray
    duration_s: np.ndarray
    budget_s: np.ndarray
    arrival_s: np.ndarray

    def __post_init__(self) -> None:
        dtypes = {"kinds": str, "hacking": bool, "tenants": np.int64, "gpus": np.int64}
        for f in fields(self):
            dtype = dtypes.get(f.name, float)
            column: np.ndarray = np.asarray(getattr(self, f.name)).astype(dtype, copy=False)
            object.__setattr__(self, f.name, column)

    def rows(self, first: int, stop: int) -> JobColumns:
        return JobColumns(*(getattr(self, f.name)[first:stop] for f in fields(self)))


def build_workload(
    config: WorkloadConfig,
    seed: int,
    columns: JobColumns,
    s_curve: np.random.Generator,
    s_noise: np.random.Generator,
    job_ids: np.ndarray | None = None,
) -> Workload:
    """Jobs from drawn columns: curves, evals and hidden truth (also for trace-driven workloads),
    as a columnar :class:`Workload` (job ids 0..n-1 unless ``job_ids`` is given).

    Curves are drawn in batches; the draws from ``s_curve`` and ``s_noise`` are those of a
    job-by-job loop, in job order."""
    p = np.arange(1, config.evals_per_job + 1) / config.evals_per_job
    n = columns.kinds.size
    score, true_q = np.empty((n, p.size)), np.empty((n, p.size))
    peak_p, peak_value, loss_tau = np.empty(n), np.empty(n), np.empty(n)
    for first in range(0, n, _BATCH):
        batch = columns.rows(first, first + _BATCH)
        rows = slice(first, first + batch.kinds.size)
        drawn = _draw_curves(config, s_curve, batch.kinds, batch.hacking, p)
        score[rows] = drawn.true_q + s_noise.normal(0.0, config.eval_noise, drawn.true_q.shape)
        true_q[rows], loss_tau[rows] = drawn.true_q, drawn.loss_tau
        peak_p[rows], peak_value[rows] = drawn.peak_p, drawn.peak_value
    vocab, kind_codes = _kind_codes(columns.kinds)
    table = JobTable(
        job_id=np.arange(n) if job_ids is None else job_ids, tenant=columns.tenants, kind=kind_codes,
        kinds=vocab, gpus=columns.gpus, arrival_s=columns.arrival_s, budget_s=columns.budget_s,
        hacking=columns.hacking, duration_s=columns.duration_s, peak_progress=peak_p,
        true_peak=peak_value, true_final=true_q[:, -1].copy(),
        evals=DenseEvals(p, score, loss_tau, true_q),
    )
    return Workload(config, seed, table=table)


def _kind_codes(kinds: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    """(vocabulary, code per job): the known ``KINDS`` first, then any other kind a loader gave."""
    vocab = list(KINDS)
    codes = np.full(kinds.size, -1, dtype=np.int64)
    for i, kind in enumerate(KINDS):
        codes[kinds == kind] = i
    if np.any(codes < 0):
        for kind in np.unique(kinds[codes < 0]).tolist():
            codes[kinds == kind] = len(vocab)
            vocab.append(kind)
    return tuple(vocab), codes


# -- curves ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Curves:
    """Drawn curves, one row per job: true quality at each eval's progress, the training loss's
    time constant (``table.loss_at`` gives the loss), the progress of the true peak, and the
    peak value."""

    true_q: np.ndarray
    loss_tau: np.ndarray
    peak_p: np.ndarray
    peak_value: np.ndarray


def _draw_curves(
    config: WorkloadConfig, rng: np.random.Generator, kinds: np.ndarray, hacking: np.ndarray, p: np.ndarray
) -> _Curves:
    """The curves of every job at progress ``p``.

    Every job draws the same six uniforms from ``rng`` whatever its kind (start, peak, loss tau,
    gain, rate, plateau), job after job, so changing one kind's parameters does not shift the
    other jobs' curves. A kind other than RLHF or LoRA is drawn as DPO.
    """
    u = rng.random((kinds.size, 6))
    start = _lerp(config.quality_start, u[:, 0])
    peak = _lerp((config.peak_low, config.peak_high), u[:, 1])
    rlhf, lora = kinds == "rlhf", kinds == "lora"
    hack = rlhf & hacking
    gain = np.select(
        [rlhf, lora],
        [_lerp(config.rlhf_gain, u[:, 3]), _lerp(config.lora_gain, u[:, 3])],
        _lerp(config.dpo_gain, u[:, 3]),
    )
    return _Curves(
        true_q=start[:, None] + gain[:, None] * _shapes(config, u, rlhf & ~hack, lora, hack, peak, p),
        loss_tau=_lerp(config.loss_tau, u[:, 2]),
        peak_p=np.where(hack, peak, 1.0),
        peak_value=start + gain,
    )


def _shapes(
    config: WorkloadConfig,
    u: np.ndarray,
    healthy: np.ndarray,
    lora: np.ndarray,
    hack: np.ndarray,
    peak: np.ndarray,
    p: np.ndarray,
) -> np.ndarray:
    """Each job's normalised curve shape at ``p``, from its uniforms ``u``, kind and peak."""
    shape = np.empty((u.shape[0], p.size))
    dpo = ~(healthy | hack | lora)
    # gao_rl depends on p only through p / peak: one call covers every hacking job.
    shape[hack] = curves.gao_rl(p / peak[hack, None], 1.0, config.gao_gamma)
    shape[healthy] = _saturating_rows(p, _lerp(config.healthy_rate, u[healthy, 4]))
    shape[lora] = _saturating_rows(p, _lerp(config.lora_rate, u[lora, 4]))
    rate, plateau = _lerp(config.dpo_rate, u[dpo, 4]), _lerp(config.dpo_plateau_from, u[dpo, 5])
    shape[dpo] = _saturating_rows(np.minimum(p / plateau[:, None], 1.0), rate)
    return shape


def _saturating_rows(p: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """The saturating rise ``(1 - e^(-rate p)) / (1 - e^(-rate))`` (reaching 1 at p = 1; a straight
    line as rate -> 0) of every job j at once, with ``rate[j]`` (``p`` is one progress row shared
    by every job, or one row per job)."""
    r = rate[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rising = -_snap.expm1(-r * p) / -_snap.expm1(-r)
    return np.where(r < 1e-9, np.broadcast_to(p, rising.shape), rising)


def _lerp(bounds: tuple[float, float], u: np.ndarray) -> np.ndarray:
    """``bounds[0] + (bounds[1] - bounds[0]) * u``: the arithmetic of ``rng.uniform(*bounds)``."""
    return bounds[0] + (bounds[1] - bounds[0]) * u
