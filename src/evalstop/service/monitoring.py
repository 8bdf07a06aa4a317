"""Each job's ``Monitor``, persisted as JSON in ``jobs.monitor_state``.

Ingest loads the job's monitor (one JSON value on the job row it already reads), folds in the
new scores of the watched metric with their checkpoint URIs, and writes the monitor back in the
same transaction: a single-score POST costs the same at 10 evals as at 100,000, and never reads
the score history. A job whose ``monitor_state`` is NULL (registered before the column existed)
gets its monitor built once from its stored history, then persisted (such a job predates
cadences, so its monitor asks for every eval, as migration 0006 records for it).

Decoding the stored monitor was about a quarter of an ingest's CPU (the driver's JSON parse, then
``Monitor.from_json``), so ingest keeps the monitor it wrote in :data:`MEMO`, keyed by the exact
text it stored. The next ingest of the job reads the stored text (a string compare, no parse)
and takes the kept monitor only when the text is the same; any other writer (another replica, a
rewind, an override) stored other text, so it decodes as before. See :class:`MonitorMemo`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..detectors import CadencePolicy, Detector, Monitor, OnDetect, detector_for
from .score import ScoreIn
from .store import Conn
from .store import score as score_store
from .store.decision import Decision


def new_monitor_state(
    detector: Detector, cadence: CadencePolicy | None = None, eval_interval: int | None = None,
    policy: OnDetect | None = None,
) -> dict[str, Any]:
    """The ``monitor_state`` of a job registered with ``detector``, its eval ``cadence`` (default
    every:1), ``eval_interval`` (steps between eval opportunities, if known) and on-detect
    ``policy`` (default: stop)."""
    return Monitor(detector, cadence, eval_interval, policy=policy).to_json()


class MonitorMemo:
    """Decoded monitors, one per job, each kept with the text it was stored as and the job's
    detector spec. Bounded by the length of the kept texts together (``max_chars``; the least
    recently used go first). A decoded monitor takes 2-3 times its text's size in memory, so the
    default 16 M characters are at most ~60 MB with the texts: ~4,600 jobs of the default rule at
    5,000 evals (3.5 k characters), ~35,000 of ``evalstop:k=3``. A job posting again after its
    monitor went is decoded, as before.

    The rule that keeps it right: :meth:`take` returns a monitor only if it equals
    ``Monitor.from_json(text, detector)``, and removes it, so the taker owns it: a request that
    mutates the monitor and then fails (a conflict, a rolled-back commit) leaves no entry behind.
    :meth:`keep` is called with the text just written, after the last change to the monitor. A
    kept monitor whose write was rolled back is never served: the stored text is then the old
    one. Writers to one job are serialised (the row lock; SQLite's one commit thread), so no two
    requests hold one monitor."""

    def __init__(self, max_chars: int = 16_000_000) -> None:
        self.max_chars = max_chars
        self._kept: dict[str, tuple[str, str, Monitor]] = {}
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def take(self, job_id: str, detector: str, text: str) -> Monitor | None:
        with self._lock:
            kept = self._kept.pop(job_id, None)
            if kept is not None:
                self._chars -= len(kept[0])
            if kept is not None and kept[0] == text and kept[1] == detector:
                self.hits += 1
                return kept[2]
            self.misses += 1
            return None

    def keep(self, job_id: str, detector: str, text: str, monitor: Monitor) -> None:
        if len(text) > self.max_chars:
            return
        with self._lock:
            old = self._kept.pop(job_id, None)  # re-inserted below: now the most recent
            self._chars += len(text) - (0 if old is None else len(old[0]))
            self._kept[job_id] = (text, detector, monitor)
            while self._chars > self.max_chars:
                dropped = self._kept.pop(next(iter(self._kept)))
                self._chars -= len(dropped[0])

    def kept(self, job_id: str) -> tuple[str, Monitor] | None:
        """The text and monitor kept for the job, if any (left in place; for checks)."""
        with self._lock:
            kept = self._kept.get(job_id)
        return None if kept is None else (kept[0], kept[2])

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._chars = 0


#: The process's memo (every store in it: a job id names one job, and the text decides).
MEMO = MonitorMemo()


def stored_text(monitor: Monitor) -> str:
    """The monitor as ingest stores it (and keys :data:`MEMO` by)."""
    return json.dumps(monitor.to_json(), allow_nan=False)


def load_monitor(conn: Conn, job: Mapping[Any, Any], max_history: int) -> Monitor:
    """The job's monitor as stored (a dict, or its JSON text as ingest reads it; the text is
    looked up in :data:`MEMO` first), or rebuilt from the stored history when there is none."""
    detector = detector_for(job["detector"])
    saved = job.get("monitor_state")
    if isinstance(saved, str):
        kept = MEMO.take(job["id"], job["detector"], saved)
        return kept if kept is not None else Monitor.from_json(saved, detector)
    if saved is not None:
        return Monitor.from_json(saved, detector)
    monitor = Monitor(detector)
    history = score_store.history(conn, job["id"], job["metric"], max_history)
    monitor.observe_many([s.to_eval() for s in history], [s.checkpoint_uri for s in history])
    return monitor


def observe_new(monitor: Monitor, new: Sequence[ScoreIn], metric: str) -> bool:
    """Fold the new scores of ``metric`` (in step order; each names its metric) into ``monitor``;
    True if any."""
    watched = [s for s in new if s.metric == metric]
    if watched:
        monitor.observe_many([s.to_eval() for s in watched], [s.checkpoint_uri for s in watched])
    return bool(watched)


def decision_of(
    job: Mapping[Any, Any], monitor: Monitor, *, source: str, shadow: bool, reason: str, step: int | None,
    correction: str | None = None,
) -> Decision:
    """The decision ``source`` takes on the job now, with the rule's state as ``monitor`` has it."""
    verdict = monitor.verdict
    return Decision(source=source, shadow=shadow, reason=reason, detector=job["detector"], step=step,
                    n_evals=monitor.n_evals + monitor.n_ignored, best_step=verdict.best_step,
                    best_score=verdict.best_score, best_checkpoint_uri=monitor.best_checkpoint,
                    correction=correction)
