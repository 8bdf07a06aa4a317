"""Trace-driven workloads: arrivals, job sizes and durations from the Microsoft Philly trace.

The trace (``philly.csv``: ``timestamp,duration,num_gpus,gpu_time,cluster``, one row per job;
shipped compressed in ``evalstop/data``, see its ``NOTICE.md``) has no notion of LoRA, DPO or
RLHF, and no eval curves. The loader keeps what the trace knows and draws the rest from the synthetic model:

1. **Filter.** Jobs shorter than ``min_duration_s`` (10 min: mostly failed or debug runs, which
   never reach an eval) or longer than ``max_duration_s`` (2 days) are dropped, and so are jobs
   with more GPUs than the simulated cluster.
2. **Window.** Jobs are sorted by submission time; a seed picks the start of a window of
   ``n_jobs`` consecutive jobs, so each replicate sees a different stretch of the trace.
3. **Kinds by GPU-hours bucket.** Within the window, jobs are ranked by GPU-hours
   (``gpu_time``). The cheapest ``(1 - rlhf_share) * lora_share_of_rest`` become LoRA, the next
   ``(1 - rlhf_share) * (1 - lora_share_of_rest)`` DPO, and the rest RLHF: fine-tuning cost
   grows LoRA < DPO < RLHF. Ties in GPU-hours break by submission order. Among RLHF jobs a
   ``hacking_share`` are labelled hacking, as in the synthetic model.
4. **Sizes and durations** are the trace's own. The declared budget (SRTF-Est's estimate) is the
   duration times the same log-normal error as the synthetic model.
5. **Arrivals** keep the trace's inter-arrival pattern (bursts, quiet nights) but the time axis is
   stretched so that the window's offered load on ``total_gpus`` equals ``offered_load``: the
   Philly clusters are far larger than the simulated one.
6. **Curves** (true quality, eval noise, training loss) are drawn per kind exactly as in
   :func:`evalstop.workloads.generate` (``build_workload`` is shared).
"""

from __future__ import annotations

import csv
import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .. import _snap
from .._validation import check_float
from ..data import philly_path, read_philly_bytes
from .model import KINDS, JobColumns, Workload, WorkloadConfig, build_workload

__all__ = ["PhillyTrace", "TraceSpec", "default_trace_path", "generate_from_trace", "load_trace"]


@dataclass(frozen=True)
class TraceSpec:
    """Which trace to read and which of its jobs to keep. ``path`` None means the packaged
    trace (:func:`default_trace_path`); a path may be a ``.csv`` or a ``.csv.gz``."""

    path: str | None = None
    min_duration_s: float = 600.0
    max_duration_s: float = 172_800.0

    def __post_init__(self) -> None:
        check_float("TraceSpec", "min_duration_s", self.min_duration_s, low=0.0)
        low = self.min_duration_s
        check_float("TraceSpec", "max_duration_s", self.max_duration_s, low=low, low_open=True)

    def resolve(self) -> Path:
        path = Path(self.path) if self.path is not None else default_trace_path()
        if not path.is_file():
            raise FileNotFoundError(f"Philly trace not found at {path}")
        return path


@dataclass(frozen=True)
class PhillyTrace:
    """Jobs of the trace, sorted by submission time. ``digest`` identifies the file's content."""

    submit_s: np.ndarray  # seconds since the first submission
    duration_s: np.ndarray
    gpus: np.ndarray
    gpu_s: np.ndarray
    digest: str


def default_trace_path() -> Path:
    """``$EVALSTOP_PHILLY`` if set (another copy of the trace), else the packaged trace."""
    env = os.environ.get("EVALSTOP_PHILLY")
    return Path(env) if env else philly_path()


@lru_cache(maxsize=4)
def load_trace(path: str) -> PhillyTrace:
    """Read and sort the trace at ``path`` (cached per process)."""
    raw = read_philly_bytes(Path(path))
    rows = list(csv.DictReader(raw.decode().splitlines()))
    if not rows or not {"timestamp", "duration", "num_gpus", "gpu_time"} <= set(rows[0]):
        raise ValueError(f"{path}: expected columns timestamp,duration,num_gpus,gpu_time")
    stamps = np.array([r["timestamp"].replace(" ", "T") for r in rows], dtype="datetime64[s]")
    submit = (stamps - stamps.min()).astype(np.int64).astype(float)
    order = np.argsort(submit, kind="stable")
    return PhillyTrace(
        submit_s=submit[order] - submit[order][0],
        duration_s=np.array([float(r["duration"]) for r in rows])[order],
        gpus=np.array([int(float(r["num_gpus"])) for r in rows], dtype=np.int64)[order],
        gpu_s=np.array([float(r["gpu_time"]) for r in rows])[order],
        digest=hashlib.sha256(raw).hexdigest()[:16],
    )


def trace_digest(spec: TraceSpec) -> str:
    return load_trace(str(spec.resolve())).digest


def generate_from_trace(config: WorkloadConfig, spec: TraceSpec, seed: int) -> Workload:
    """A workload of ``config.n_jobs`` trace jobs (see the module docstring for the mapping)."""
    trace = load_trace(str(spec.resolve()))
    keep = np.flatnonzero(
        (trace.duration_s >= spec.min_duration_s) & (trace.duration_s <= spec.max_duration_s)
        & (trace.gpus >= 1) & (trace.gpus <= config.total_gpus)
    )
    n = config.n_jobs
    if keep.size < n:
        raise ValueError(f"the trace has {keep.size} usable jobs; n_jobs={n} asks for more")
    s_window, s_label, s_curve, s_noise, s_budget = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(5)
    )
    start = int(s_window.integers(0, keep.size - n + 1))
    idx = keep[start:start + n]
    duration_s = trace.duration_s[idx].astype(float)
    gpus = trace.gpus[idx]
    kinds = _kinds_by_gpu_hours(config, duration_s * gpus)
    hacking = (kinds == "rlhf") & (s_label.random(n) < config.hacking_share)
    tenants = s_label.integers(0, config.n_tenants, n)
    budget_s = duration_s * _snap.exp(s_budget.normal(0.0, config.budget_error_sigma, n))
    submit = trace.submit_s[idx] - trace.submit_s[idx][0]
    arrival_s = _scale_arrivals(submit, gpus, duration_s, config)
    columns = JobColumns(kinds, hacking, tenants, gpus, duration_s, budget_s, arrival_s)
    return build_workload(config, seed, columns, s_curve, s_noise)


def _kinds_by_gpu_hours(config: WorkloadConfig, gpu_s: np.ndarray) -> np.ndarray:
    n = gpu_s.size
    rest = 1.0 - config.rlhf_share
    n_lora = round(n * rest * config.lora_share_of_rest)
    n_dpo = round(n * rest) - n_lora
    rank = np.argsort(gpu_s, kind="stable")
    kinds = np.full(n, KINDS[0], dtype=object)
    kinds[rank[:n_lora]] = "lora"
    kinds[rank[n_lora:n_lora + n_dpo]] = "dpo"
    return kinds.astype(str)


def _scale_arrivals(submit_s: np.ndarray, gpus: np.ndarray, duration_s: np.ndarray,
                    config: WorkloadConfig) -> np.ndarray:
    """Stretch the window's time axis so offered load = GPU-seconds / (GPUs x span) = target."""
    work = float(np.sum(gpus * duration_s))
    span = work / (config.offered_load * config.total_gpus)
    observed = float(submit_s[-1])
    if observed <= 0:  # every job submitted at once: spread them evenly
        return np.linspace(0.0, span, submit_s.size)
    return submit_s * (span / observed)
