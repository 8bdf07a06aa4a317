"""A workload in columns: one numpy entry per job, and eval curves as arrays.

The simulator reads a :class:`JobTable`; ``Workload.jobs`` and ``Workload.truth`` (one record
per job, one :class:`Eval` per eval) are built from it only when someone asks for them. A
generated workload holds its curves densely (every job has the same eval progress points, so a
score matrix); a workload built from records keeps them (:class:`RecordEvals`). Either way the
simulator asks for a job's evals only when a stopping rule needs them, one job at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..detectors import Eval
from . import curves
from .records import JobSpec, JobTruth

Array = np.ndarray[Any, Any]


class DenseEvals:
    """Every job evaluated at the same progress points ``progress`` (steps 1..E): scores and
    true quality as (jobs x evals) float64 matrices. The training loss is a function of
    progress and one time constant per job (``loss_tau``): it is computed for the rows asked
    for, and kept as a third matrix (80 MB at a million jobs) only once someone reads the
    evals job by job (``row``: the event path, rules folded one job at a time), which the
    batch plan of the simulator's fast path never does."""

    __slots__ = ("_loss", "_progress", "loss_tau", "progress", "score", "true_q")

    def __init__(self, progress: Array, score: Array, loss_tau: Array, true_q: Array) -> None:
        self.progress = np.asarray(progress, dtype=float)
        self.score, self.loss_tau, self.true_q = score, np.asarray(loss_tau, dtype=float), true_q
        self._progress: tuple[float, ...] = tuple(self.progress.tolist())
        self._loss: Array | None = None

    def losses(self, first: int, stop: int) -> Array:
        """The training loss of rows [first, stop) at each eval, as a (rows x evals) matrix."""
        if self._loss is not None:
            return self._loss[first:stop]
        return loss_at(self.progress, self.loss_tau[first:stop])

    def row(self, i: int) -> tuple[Eval, ...]:
        if self._loss is None:  # (a numpy call per row would double the cost of a row)
            self._loss = loss_at(self.progress, self.loss_tau)
        return tuple(map(Eval, range(1, len(self._progress) + 1), self.score[i].tolist(),
                         self._progress, self._loss[i].tolist()))

    def rows(self, first: int, stop: int) -> list[tuple[Eval, ...]]:
        """``row(i)`` for every i in [first, stop), in one pass (cheaper per job)."""
        n_evals = len(self._progress)
        steps = range(1, n_evals + 1)
        scores, losses = self.score[first:stop].tolist(), self.losses(first, stop).tolist()
        pairs = zip(scores, losses, strict=True)
        return [tuple(map(Eval, steps, score, self._progress, loss)) for score, loss in pairs]

    def progress_of(self, i: int) -> Sequence[float | None]:
        return self._progress

    def n_evals(self, i: int) -> int:
        return len(self._progress)

    def true_at(self, i: int) -> tuple[float, ...]:
        return tuple(self.true_q[i].tolist())

    def true_at_index(self, i: int, k: int) -> float:
        value: float = self.true_q[i, k].item()
        return value


class RecordEvals:
    """Evals kept as the records a loader built (any progress points, any count per job)."""

    __slots__ = ("jobs", "truth")

    def __init__(self, jobs: Sequence[JobSpec], truth: Sequence[JobTruth]) -> None:
        self.jobs, self.truth = jobs, truth

    def row(self, i: int) -> tuple[Eval, ...]:
        return self.jobs[i].evals

    def progress_of(self, i: int) -> Sequence[float | None]:
        return tuple(ev.progress for ev in self.jobs[i].evals)

    def n_evals(self, i: int) -> int:
        return len(self.jobs[i].evals)

    def true_at(self, i: int) -> tuple[float, ...]:
        return self.truth[i].true_at_evals

    def true_at_index(self, i: int, k: int) -> float:
        return self.truth[i].true_at_evals[k]


class JobTable:
    """Per-job columns (row = the job's position in the workload). ``kind`` holds codes into
    ``kinds``. Public fields (what a platform sees) and truth (what only metrics read) sit side
    by side here; the simulator hands a scheduler only a ``JobView`` of the public ones."""

    __slots__ = (
        "arrival_s", "budget_s", "duration_s", "evals", "gpus", "hacking", "job_id", "kind", "kinds",
        "peak_progress", "tenant", "true_final", "true_peak",
    )

    def __init__(self, *, job_id: ArrayLike, tenant: ArrayLike, kind: ArrayLike, kinds: Sequence[str],
                 gpus: ArrayLike, arrival_s: ArrayLike, budget_s: ArrayLike, hacking: ArrayLike,
                 duration_s: ArrayLike, peak_progress: ArrayLike, true_peak: ArrayLike, true_final: ArrayLike,
                 evals: DenseEvals | RecordEvals) -> None:
        self.job_id = np.asarray(job_id, dtype=np.int64)
        self.tenant = np.asarray(tenant, dtype=np.int64)
        self.kind = np.asarray(kind, dtype=np.int64)
        self.kinds = tuple(kinds)
        self.gpus = np.asarray(gpus, dtype=np.int64)
        self.arrival_s = np.asarray(arrival_s, dtype=float)
        self.budget_s = np.asarray(budget_s, dtype=float)
        self.hacking = np.asarray(hacking, dtype=bool)
        self.duration_s = np.asarray(duration_s, dtype=float)
        self.peak_progress = np.asarray(peak_progress, dtype=float)
        self.true_peak = np.asarray(true_peak, dtype=float)
        self.true_final = np.asarray(true_final, dtype=float)
        self.evals = evals

    def __len__(self) -> int:
        return int(self.job_id.size)

    def replace(self, **columns: Any) -> JobTable:
        """A copy with the given columns replaced (e.g. ``arrival_s=...``); the rest shared."""
        unknown = sorted(set(columns) - set(self.__slots__))
        if unknown:
            raise ValueError(f"JobTable has no columns {unknown}")
        return JobTable(**{name: columns.get(name, getattr(self, name)) for name in self.__slots__})

    @classmethod
    def from_records(cls, jobs: Sequence[JobSpec], truth: Sequence[JobTruth]) -> JobTable:
        if len(jobs) != len(truth):
            raise ValueError(f"A workload needs one truth per job: {len(jobs)} jobs, {len(truth)} truths")
        kinds = tuple(dict.fromkeys(spec.kind for spec in jobs))
        code = {kind: i for i, kind in enumerate(kinds)}
        return cls(
            job_id=[s.job_id for s in jobs], tenant=[s.tenant for s in jobs],
            kind=[code[s.kind] for s in jobs], kinds=kinds, gpus=[s.gpus for s in jobs],
            arrival_s=[s.arrival_s for s in jobs], budget_s=[s.budget_s for s in jobs],
            hacking=[t.hacking for t in truth], duration_s=[t.duration_s for t in truth],
            peak_progress=[t.peak_progress for t in truth], true_peak=[t.true_peak for t in truth],
            true_final=[t.true_final for t in truth], evals=RecordEvals(jobs, truth),
        )

    def records(self) -> tuple[tuple[JobSpec, ...], tuple[JobTruth, ...]]:
        """The (jobs, truth) records of every row."""
        evals = self.evals
        if isinstance(evals, RecordEvals):
            return tuple(evals.jobs), tuple(evals.truth)
        n = len(self)
        rows: list[tuple[Eval, ...]] = []
        for first in range(0, n, 4096):
            rows += evals.rows(first, min(n, first + 4096))
        kinds = [self.kinds[k] for k in self.kind.tolist()]
        jobs = tuple(map(JobSpec, self.job_id.tolist(), self.tenant.tolist(), kinds, self.gpus.tolist(),
                         self.arrival_s.tolist(), self.budget_s.tolist(), rows))
        true_at = map(tuple, evals.true_q.tolist())
        truth = tuple(map(JobTruth, self.hacking.tolist(), self.duration_s.tolist(),
                          self.peak_progress.tolist(), true_at, self.true_peak.tolist(),
                          self.true_final.tolist()))
        return jobs, truth


def loss_at(progress: Array, tau: Array) -> Array:
    """Training loss at ``progress`` (one row shared by every job) of jobs with loss time
    constants ``tau``: a (jobs x evals) matrix. It depends on progress only through
    progress / tau, so one call covers every job (and a row gives the same floats whichever
    rows are asked for with it)."""
    return curves.training_loss(progress / tau[:, None], 1.0)
