"""Each job's ``Monitor``, persisted as JSON in ``jobs.monitor_state``.

Ingest loads the job's monitor (one JSON value on the job row it already reads), folds in the
new scores of the watched metric with their checkpoint URIs, and writes the monitor back in the
same transaction: a single-score POST costs the same at 10 evals as at 100,000, and never reads
the score history. A job whose ``monitor_state`` is NULL (registered before the column existed)
gets its monitor built once from its stored history, then persisted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from ..detectors import Detector, Eval, Monitor, parse_spec
from .store import Conn, Store
from .store import monitor as monitor_store
from .store import score as score_store


@lru_cache(maxsize=1024)
def detector_for(spec: str) -> Detector:
    return parse_spec(spec)


def new_monitor_state(detector: Detector) -> dict[str, Any]:
    """The ``monitor_state`` of a job registered with ``detector``."""
    return Monitor(detector).to_json()


def load_monitor(conn: Conn, job: Mapping[Any, Any], max_history: int) -> Monitor:
    """The job's monitor as stored (a dict, or JSON text on SQLite's raw path), or rebuilt from
    the stored history when there is none."""
    detector = detector_for(job["detector"])
    saved = job.get("monitor_state")
    if saved is not None:
        return Monitor.from_json(saved, detector)
    monitor = Monitor(detector)
    rows = score_store.history(conn, job["id"], job["metric"], max_history)
    monitor.observe_many([Eval(r.step, r.value, r.progress, r.loss) for r in rows],
                         [r.checkpoint_uri for r in rows])
    return monitor


def observe_rows(monitor: Monitor, rows: Sequence[Mapping[str, Any]], metric: str) -> bool:
    """Fold the new score rows of ``metric`` (in step order) into ``monitor``; True if any."""
    watched = [r for r in rows if r["metric"] == metric]
    if watched:
        monitor.observe_many([Eval(r["step"], r["value"], r["progress"], r["loss"]) for r in watched],
                             [r["checkpoint_uri"] for r in watched])
    return bool(watched)


def save_monitor(store: Store, conn: Conn, job_id: str, monitor: Monitor) -> None:
    """Write the monitor back to the job row (inside the caller's transaction)."""
    monitor_store.save(store, conn, job_id, monitor.to_json())
