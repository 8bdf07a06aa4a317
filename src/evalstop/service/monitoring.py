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
from functools import lru_cache
from typing import Any

from ..detectors import CadencePolicy, Detector, Monitor, OnDetect, parse_spec
from .score import ScoreIn
from .store import Conn
from .store import score as score_store


@lru_cache(maxsize=1024)
def detector_for(spec: str) -> Detector:
    return parse_spec(spec)


def new_monitor_state(
    detector: Detector, cadence: CadencePolicy | None = None, eval_interval: int | None = None,
    policy: OnDetect | None = None,
) -> dict[str, Any]:
    """The ``monitor_state`` of a job registered with ``detector``, its eval ``cadence`` (default
    every:1), ``eval_interval`` (steps between eval opportunities, if known) and on-detect
    ``policy`` (default: stop)."""
    return Monitor(detector, cadence, eval_interval, policy=policy).to_json()


class MonitorMemo:
    """Decoded monitors, one per job (at most ``size``, least recently used dropped), each kept
    with the text it was stored as and the job's detector spec.

    The rule that keeps it right: :meth:`take` returns a monitor only if it equals
    ``Monitor.from_json(text, detector)``, and removes it, so the taker owns it: a request that
    mutates the monitor and then fails (a conflict, a rolled-back commit) leaves no entry behind.
    :meth:`keep` is called with the text just written, after the last change to the monitor. A
    kept monitor whose write was rolled back is never served: the stored text is then the old
    one. Writers to one job are serialised (the row lock; SQLite's one commit thread), so no two
    requests hold one monitor."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._kept: dict[str, tuple[str, str, Monitor]] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def take(self, job_id: str, detector: str, text: str) -> Monitor | None:
        with self._lock:
            kept = self._kept.pop(job_id, None)
            if kept is not None and kept[0] == text and kept[1] == detector:
                self.hits += 1
                return kept[2]
            self.misses += 1
            return None

    def keep(self, job_id: str, detector: str, text: str, monitor: Monitor) -> None:
        with self._lock:
            self._kept[job_id] = (text, detector, monitor)  # re-inserted: now the most recent
            if len(self._kept) > self.size:
                del self._kept[next(iter(self._kept))]

    def kept(self, job_id: str) -> tuple[str, Monitor] | None:
        """The text and monitor kept for the job, if any (left in place; for checks)."""
        with self._lock:
            kept = self._kept.get(job_id)
        return None if kept is None else (kept[0], kept[2])

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


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
