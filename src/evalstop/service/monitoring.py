"""Each job's ``Monitor``, persisted as JSON in ``jobs.monitor_state``.

Ingest loads the job's monitor (one JSON value on the job row it already reads), folds in the
new scores of the watched metric with their checkpoint URIs, and writes the monitor back in the
same transaction: a single-score POST costs the same at 10 evals as at 100,000, and never reads
the score history. A job whose ``monitor_state`` is NULL (registered before the column existed)
gets its monitor built once from its stored history, then persisted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..detectors import Detector, Eval, Monitor, parse_spec
from .store import jobs, scores

_UPDATE_SQLITE = "UPDATE jobs SET monitor_state = ? WHERE id = ?"


@lru_cache(maxsize=1024)
def detector_for(spec: str) -> Detector:
    return parse_spec(spec)


def new_monitor_state(detector: Detector) -> dict[str, Any]:
    """The ``monitor_state`` of a job registered with ``detector``."""
    return Monitor(detector).to_json()


def load_monitor(conn: Connection, job: Mapping[Any, Any], max_history: int) -> Monitor:
    """The job's monitor as stored (a dict, or JSON text on SQLite's raw path), or rebuilt from
    the stored history when there is none."""
    detector = detector_for(job["detector"])
    saved = job.get("monitor_state")
    if saved is not None:
        return Monitor.from_json(saved, detector)
    monitor = Monitor(detector)
    cols = (scores.c.step, scores.c.value, scores.c.progress, scores.c.loss, scores.c.checkpoint_uri)
    query = (sa.select(*cols).where(scores.c.job_id == job["id"], scores.c.metric == job["metric"])
             .order_by(scores.c.step).limit(max_history))
    rows = conn.execute(query).all()
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


def save_monitor(conn: Connection, job_id: str, monitor: Monitor, *, raw_sqlite: bool) -> None:
    """Write the monitor back to the job row (inside the caller's transaction)."""
    state = monitor.to_json()
    if raw_sqlite:
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.execute(_UPDATE_SQLITE, (json.dumps(state, allow_nan=False), job_id))
    else:
        conn.execute(jobs.update().where(jobs.c.id == job_id).values(monitor_state=state))
