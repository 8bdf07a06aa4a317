"""Each job's ``Monitor``, persisted as JSON in ``jobs.monitor_state``.

Ingest loads the job's monitor (one JSON value on the job row it already reads), folds in the
new scores of the watched metric with their checkpoint URIs, and writes the monitor back in the
same transaction: a single-score POST costs the same at 10 evals as at 100,000, and never reads
the score history. A job whose ``monitor_state`` is NULL (registered before the column existed)
gets its monitor built once from its stored history, then persisted (such a job predates
cadences, so its monitor asks for every eval, as migration 0006 records for it).
"""

from __future__ import annotations

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


def load_monitor(conn: Conn, job: Mapping[Any, Any], max_history: int) -> Monitor:
    """The job's monitor as stored (a dict, or JSON text on SQLite's raw path), or rebuilt from
    the stored history when there is none."""
    detector = detector_for(job["detector"])
    saved = job.get("monitor_state")
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
