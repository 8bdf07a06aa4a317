"""What one simulation run produces: one record per job, plus run totals."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, overload

import numpy as np


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How one job ended. Label-bearing fields (``hacking``, ``true_*``) come from the
    workload's hidden truth and are filled in by the simulator only after the run."""

    job_id: int
    tenant: int
    kind: str
    gpus: int
    hacking: bool
    arrival_s: float
    start_s: float  # first time the job got GPUs
    end_s: float  # completion or termination
    killed: bool  # True if a stopping rule terminated it (at any eval, the last one included)
    stop_progress: float | None  # progress at the kill, None if not killed
    end_progress: float  # progress when it ended (1.0 if it completed)
    n_preemptions: int
    gpu_s_useful: float  # GPU-seconds of training progress
    gpu_s_overhead: float  # GPU-seconds spent on preemption overhead (restore)
    gpu_s_after_peak: float  # GPU-seconds of progress after the job's true quality peak
    true_peak: float  # true quality at the true peak
    true_delivered: float  # true quality of the delivered checkpoint

    @property
    def jct_s(self) -> float:
        return self.end_s - self.arrival_s

    @property
    def regret(self) -> float:
        return self.true_peak - self.true_delivered


@dataclass(frozen=True)
class SimResult:
    policy: str
    seed: int
    total_gpus: int
    makespan_s: float  # first arrival to last departure
    outcomes: Sequence[JobOutcome]  # an OutcomeTable from the simulator
    event_log_hash: str

    @property
    def columns(self) -> dict[str, np.ndarray[Any, Any]]:
        """The outcomes as numpy columns named as :class:`JobOutcome`'s fields (no records built
        for a simulator result)."""
        if isinstance(self.outcomes, OutcomeTable):
            return self.outcomes.columns
        rows = [[getattr(o, name) for o in self.outcomes] for name in _FIELDS]
        return {name: np.array(col, dtype=float if name == "stop_progress" else None)
                for name, col in zip(_FIELDS, rows, strict=True)}


class OutcomeTable(Sequence[JobOutcome]):
    """Every job's outcome as columns (numpy arrays named as :class:`JobOutcome`'s fields, one
    entry per job in workload order; ``stop_progress`` is NaN where the job was not killed).
    It is a sequence of :class:`JobOutcome`: the records are built the first time one is read,
    so a run over a million jobs need not hold a million records."""

    __slots__ = ("_records", "columns")

    def __init__(self, columns: dict[str, np.ndarray[Any, Any]]) -> None:
        missing = [name for name in _FIELDS if name not in columns]
        if missing:
            raise ValueError(f"OutcomeTable is missing the columns {missing}")
        self.columns = columns
        self._records: tuple[JobOutcome, ...] | None = None

    @property
    def records(self) -> tuple[JobOutcome, ...]:
        if self._records is None:
            lists = [self.columns[name].tolist() for name in _FIELDS]
            stop = _FIELDS.index("stop_progress")
            lists[stop] = [None if math.isnan(v) else v for v in lists[stop]]
            self._records = tuple(map(JobOutcome, *lists))
        return self._records

    def __len__(self) -> int:
        return int(self.columns["job_id"].size)

    @overload
    def __getitem__(self, index: int) -> JobOutcome: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[JobOutcome, ...]: ...

    def __getitem__(self, index: int | slice) -> JobOutcome | tuple[JobOutcome, ...]:
        return self.records[index]

    def __iter__(self) -> Iterator[JobOutcome]:
        return iter(self.records)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OutcomeTable):
            return self.records == other.records
        if isinstance(other, Sequence):
            return self.records == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OutcomeTable({len(self)} jobs)"


_FIELDS = tuple(f.name for f in fields(JobOutcome))
