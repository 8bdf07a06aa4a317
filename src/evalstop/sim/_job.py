"""Simulator-side state of one job while it is in the system, and the columns its outcome is
written to when it leaves."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..detectors import Decision, Eval, Monitor, Verdict
from ..schedulers import JobView
from ..workloads.table import DenseEvals, JobTable
from .outcome import OutcomeTable

DEPART, ARRIVE = 0, 1  # same-time priority of a heap event: free GPUs before handing them out
#: A heap event is (job, its version when scheduled, target service, code): a TIMER only makes
#: an allocation happen then (a starvation guard's wake-up, the end of a run quantum); a
#: MILESTONE is the job's next eval, kill or completion; RANK is a rank change (next_change_s);
#: KILL is a milestone known, when it was scheduled, to be the job's planned kill.
TIMER, MILESTONE, RANK, KILL = 0, 1, 2, 3


class Job(JobView):
    """One job from its arrival to its end: the view the scheduler sees (one object a job, not a
    view and a record beside it) plus the simulator's bookkeeping of it, all of which a platform
    knows too (its row, the running segment, restore time left, preemptions). The truth (the
    job's duration, its planned kill, its evals) is not here: the simulator keeps it in per-row
    columns, so a policy handed this object still cannot read it."""

    __slots__ = (
        "attained_at_seg", "first_start_s", "gpu_s_overhead", "idx", "n_preempt", "overhead_left",
        "protected_until", "seg_start", "version",
    )

    def __init__(
        self, idx: int, job_id: int, tenant: int, kind: str, gpus: int, arrival_s: float, budget_s: float
    ) -> None:
        # JobView's fields set here, not through its __init__: one call a job on the hot path
        # (and one statement a field: no tuple built).
        self.job_id = job_id
        self.tenant = tenant
        self.kind = kind
        self.gpus = gpus
        self.arrival_s = arrival_s
        self.budget_s = budget_s
        self.idx = idx
        self.running = False
        self.attained_s = self.seg_start = self.attained_at_seg = self.overhead_left = 0.0
        self.gpu_s_overhead = self.protected_until = 0.0
        self.first_start_s: float | None = None
        self.n_preempt = self.version = 0

    def attained_at(self, now: float) -> float:
        ran = now - self.seg_start - self.overhead_left
        return self.attained_at_seg + ran if ran > 0.0 else self.attained_at_seg


class Watch:
    """A job's evals on the event path: one milestone per eval, fed to its ``monitor``. With
    timed evals (``_eval_time``) ``evals`` are those run, ``targets`` their ends and ``dense``
    their indices among all the job's evals."""

    __slots__ = ("dense", "evals", "monitor", "next_eval", "targets")

    def __init__(
        self,
        evals: Sequence[Eval],
        monitor: Monitor | None,
        duration_s: float,
        targets: Sequence[float] | None = None,
        dense: Sequence[int] | None = None,
    ) -> None:
        self.evals, self.monitor, self.next_eval, self.dense = evals, monitor, 0, dense
        #: attained service (s) at each eval
        self.targets = (
            [eval_target_s(duration_s, ev.progress) for ev in evals] if targets is None else list(targets)
        )

    def dense_index(self, index: int) -> int:
        """The index among all the job's evals of the ``index``-th eval folded (repeats of a
        step are not folded: mapped through the evals' steps)."""
        if self.dense is None:
            return index
        folded, last = -1, None
        for k, ev in enumerate(self.evals):
            if last is None or ev.step > last:
                folded, last = folded + 1, ev.step
                if folded == index:
                    return self.dense[k]
        raise IndexError(index)


def eval_target_s(duration_s: float, progress: float | None) -> float:
    """Attained service at which an eval at ``progress`` happens (None: the end)."""
    return duration_s * (1.0 if progress is None else progress)


def oracle_verdict(table: JobTable, idx: int) -> Verdict:
    """Stop at the eval holding the best true checkpoint, which the oracle can see."""
    true_q = table.evals.true_at(idx)
    best = max(range(len(true_q)), key=true_q.__getitem__)
    ev = table.evals.row(idx)[best]
    return Verdict(Decision.STOP, "oracle: true peak", best, ev.step, best, ev.step, ev.score)


class OutcomeColumns:
    """What the run writes per job as it ends: ``record`` takes (row, first start, end, attained
    service, overhead GPU-s, preemptions), kept as six float64s (48 bytes a job, no objects once
    flushed); ``kill`` the kills, as (row, eval delivered or -1: the job's final quality).
    ``outcome_table`` derives the rest (progress, useful and after-peak GPU time, the delivered
    quality) with the same float operations a record would use. ``eval_s`` (timed evals only,
    ``_eval_time``): per row, the eval time (s) in its attained service at its end; the outcome
    then has ``gpu_s_eval`` and ``n_evals`` (evals run) columns, and progress and
    ``gpu_s_useful`` count training only."""

    __slots__ = ("best", "eval_s", "kill", "killed", "n_evals", "pending", "record", "rows", "table")

    def __init__(self, table: JobTable) -> None:
        self.table = table
        self.rows: list[np.ndarray[Any, Any]] = []  # flushed rows, as flat float64 chunks
        self.pending: list[tuple[Any, ...]] = []
        #: ``record(row)``: one list append a job; the caller calls ``flush`` every FLUSH rows or
        #: so, which moves them to ``rows`` in one C-level pass (no tuple or float kept).
        self.record = self.pending.append
        self.killed: list[int] = []  # rows of the killed jobs
        self.best: list[int] = []  # the eval each delivers
        self.kill = self._kill
        self.eval_s: list[float] | None = None
        self.n_evals: list[int] | None = None  # (with ``eval_s``) evals run by each job's end

    def _kill(self, idx: int, best: int) -> None:
        self.killed.append(idx)
        self.best.append(best)

    def flush(self) -> None:
        if self.pending:
            flat = itertools.chain.from_iterable(self.pending)
            self.rows.append(np.fromiter(flat, dtype=float, count=6 * len(self.pending)))
            self.pending.clear()

    def n_ended(self) -> int:
        self.flush()
        return sum(chunk.size for chunk in self.rows) // 6

    def delivered(self) -> np.ndarray[Any, Any]:
        """True quality of every job's delivered checkpoint: its final one unless killed."""
        t = self.table
        delivered = t.true_final.copy()
        rows = np.array(self.killed, dtype=np.int64)
        best = np.array(self.best, dtype=np.int64)
        at_eval = best >= 0
        if isinstance(t.evals, DenseEvals):
            delivered[rows[at_eval]] = t.evals.true_q[rows[at_eval], best[at_eval]]
        else:
            for i, k in zip(rows[at_eval].tolist(), best[at_eval].tolist(), strict=True):
                delivered[i] = t.evals.true_at_index(i, k)
        return delivered

    def outcome_table(self) -> OutcomeTable:
        self.flush()
        t = self.table
        n = len(t)
        names = ("start_s", "end_s", "attained", "gpu_s_overhead", "n_preemptions")
        columns: dict[str, np.ndarray[Any, Any]] = {name: np.zeros(n) for name in names}
        for chunk in self.rows:  # scattered a chunk at a time: no second copy of every row
            ended = chunk.reshape(-1, 6)
            idx = ended[:, 0].astype(np.int64)
            for i, name in enumerate(names, start=1):
                columns[name][idx] = ended[:, i]
        attained = columns.pop("attained")
        eval_s = None if self.eval_s is None else np.array(self.eval_s, dtype=float)
        if eval_s is not None:
            attained = np.clip(attained - eval_s, 0.0, t.duration_s)  # (round-off of + and -)
            columns["gpu_s_eval"] = eval_s * t.gpus
            columns["n_evals"] = np.array(self.n_evals, dtype=np.int64)
        killed = np.zeros(n, dtype=bool)
        killed[np.array(self.killed, dtype=np.int64)] = True
        positive = t.duration_s > 0
        progress = np.divide(attained, t.duration_s, out=np.ones_like(attained), where=positive)
        past_peak = progress - t.peak_progress
        after_peak = np.where(t.hacking & (past_peak > 0.0), past_peak, 0.0)
        columns.update({
            "job_id": t.job_id, "tenant": t.tenant, "kind": np.asarray(t.kinds, dtype=object)[t.kind],
            "gpus": t.gpus, "hacking": t.hacking, "arrival_s": t.arrival_s,
            "killed": killed, "stop_progress": np.where(killed, progress, np.nan), "end_progress": progress,
            "n_preemptions": columns["n_preemptions"].astype(np.int64),
            "gpu_s_useful": attained * t.gpus, "gpu_s_after_peak": after_peak * t.duration_s * t.gpus,
            "true_peak": t.true_peak, "true_delivered": self.delivered(),
        })
        return OutcomeTable(columns)


#: Entries a list buffer (event log, outcome rows) holds before it is moved into numpy.
FLUSH = 65536
