"""Simulator-side state of one job while it is in the system, and the columns its outcome is
written to when it leaves."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..detectors import Decision, Eval, Monitor, Verdict
from ..schedulers import JobView
from ..workloads.table import JobTable
from .outcome import OutcomeTable


class Job:
    """One job from its arrival to its end. ``view`` is all the scheduler ever sees; ``idx`` is
    the job's row in the workload's table."""

    __slots__ = (
        "attained_at_seg", "duration_s", "evals", "first_start_s", "gpu_s_overhead", "gpus", "idx",
        "job_id", "kill_at", "kill_best", "monitor", "n_preempt", "next_eval", "overhead_left",
        "progress", "protected_until", "rank_milestone", "seg_start", "target_s", "version", "view",
    )

    def __init__(self, idx: int, view: JobView, duration_s: float) -> None:
        self.idx, self.view, self.duration_s = idx, view, duration_s
        self.job_id, self.gpus = view.job_id, view.gpus
        self.seg_start = self.attained_at_seg = self.overhead_left = self.gpu_s_overhead = 0.0
        self.target_s = self.protected_until = 0.0
        self.first_start_s: float | None = None
        self.n_preempt = self.next_eval = self.version = 0
        self.kill_at: int | None = None  # eval index of the planned kill (fast path)
        self.kill_best: int | None = None  # the eval delivered at that kill
        self.monitor: Monitor | None = None  # the stopping rule watching the job (events path)
        self.progress: Sequence[float | None] = ()  # progress of each eval (when evals matter)
        self.evals: Sequence[Eval] = ()  # the job's evals (events path only)
        self.rank_milestone = False  # the scheduled milestone is a rank change (next_change_s)

    def attained_at(self, now: float) -> float:
        ran = now - self.seg_start - self.overhead_left
        return self.attained_at_seg + ran if ran > 0.0 else self.attained_at_seg

    def eval_target_s(self, index: int) -> float:
        progress = self.progress[index]
        return self.duration_s * (1.0 if progress is None else progress)


def oracle_verdict(table: JobTable, idx: int) -> Verdict:
    """Stop at the eval holding the best true checkpoint, which the oracle can see."""
    true_q = table.evals.true_at(idx)
    best = max(range(len(true_q)), key=true_q.__getitem__)
    ev = table.evals.row(idx)[best]
    return Verdict(Decision.STOP, "oracle: true peak", best, ev.step, best, ev.step, ev.score)


class OutcomeColumns:
    """What the run writes per job as it ends: ``record`` takes (row, first start, end, attained
    service, overhead GPU-s, preemptions), kept as six float64s (48 bytes a job, no objects once
    flushed); ``killed_at`` the kills. ``outcome_table`` derives the rest (progress, useful
    and after-peak GPU time) with the same float operations a record would use."""

    __slots__ = ("delivered", "killed", "pending", "record", "rows", "table")

    def __init__(self, table: JobTable) -> None:
        self.table = table
        self.rows: list[np.ndarray[Any, Any]] = []  # flushed rows, as flat float64 chunks
        self.pending: list[tuple[Any, ...]] = []
        #: ``record(row)``: one list append a job; the caller calls ``flush`` every FLUSH rows,
        #: which moves them to ``rows`` in one C-level pass (no tuple or float kept).
        self.record = self.pending.append
        self.killed: list[int] = []
        self.delivered: list[float] = []

    def flush(self) -> None:
        if self.pending:
            flat = itertools.chain.from_iterable(self.pending)
            self.rows.append(np.fromiter(flat, dtype=float, count=6 * len(self.pending)))
            self.pending.clear()

    def n_ended(self) -> int:
        self.flush()
        return sum(chunk.size for chunk in self.rows) // 6

    def killed_at(self, idx: int, best: int | None) -> None:
        self.killed.append(idx)
        self.delivered.append(self.table.true_final[idx].item() if best is None else
                              self.table.evals.true_at_index(idx, best))

    def outcome_table(self) -> OutcomeTable:
        self.flush()
        t = self.table
        n = len(t)
        ended = np.concatenate(self.rows or [np.zeros(0)]).reshape(-1, 6)
        idx = ended[:, 0].astype(np.int64)
        columns: dict[str, np.ndarray[Any, Any]] = {}
        names = ("start_s", "end_s", "attained", "gpu_s_overhead", "n_preemptions")
        for i, name in enumerate(names, start=1):
            column = np.zeros(n)
            column[idx] = ended[:, i]
            columns[name] = column
        attained = columns.pop("attained")
        killed = np.zeros(n, dtype=bool)
        killed[self.killed] = True
        delivered = t.true_final.copy()
        delivered[self.killed] = self.delivered
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
            "true_peak": t.true_peak, "true_delivered": delivered,
        })
        return OutcomeTable(columns)


FLUSH = 65536
