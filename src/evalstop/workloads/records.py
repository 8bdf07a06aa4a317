"""One job of a workload as records: what the platform sees (:class:`JobSpec`) and what only the
metrics may read (:class:`JobTruth`). The columns of :mod:`.table` and the generator of
:mod:`.model` both speak them."""

from __future__ import annotations

from dataclasses import dataclass

from ..detectors import Eval


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
