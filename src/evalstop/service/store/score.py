"""The scores aggregate: insert the new scores of a batch (refusing a changed value or a step out
of order), read them back, and read a job's history for a monitor rebuild."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import Conflict
from ..score import ScoreIn
from .dialect import SCORE_COLUMNS
from .engine import Store
from .job import JobRow, latest_step
from .job import row as job_row
from .tables import scores


def new_scores(conn: Connection, job: JobRow, items: Sequence[ScoreIn]) -> tuple[list[ScoreIn], int]:
    """The scores of ``items`` not stored yet (each naming its metric) and the number of
    duplicates; a changed value or a step out of order is a :class:`Conflict` (nothing is
    written here). ``job["latest"]`` is the latest stored step of the job's watched metric
    (other metrics are looked up here)."""
    by_metric: dict[str, list[tuple[int, ScoreIn]]] = {}
    for i, item in enumerate(items):
        by_metric.setdefault(item.metric or job["metric"], []).append((i, item))
    new: list[ScoreIn] = []
    duplicates = 0
    for metric, group in by_metric.items():
        latest = job["latest"] if metric == job["metric"] else latest_step(conn, job["id"], metric)
        found, dup = _new_scores(conn, job["id"], metric, group, latest)
        new += found
        duplicates += dup
    return new, duplicates


def write(
    store: Store, conn: Connection, job_id: str, new: Sequence[ScoreIn], now: float,
    monitor_state: str | None,
) -> None:
    """Insert the ``new`` scores (from :func:`new_scores`) and, unless None, the job's monitor
    state (its JSON text, stored as given): one statement on PostgreSQL."""
    fixed = {"job_id": job_id, "received_at": now}
    rows = [tuple(fixed[c] if c in fixed else s.__dict__[c] for c in SCORE_COLUMNS) for s in new]
    store.dialect.write_scores(conn, rows, job_id, monitor_state)


def _new_scores(
    conn: Connection, job_id: str, metric: str, group: list[tuple[int, ScoreIn]], latest: int | None,
) -> tuple[list[ScoreIn], int]:
    steps = {it.step for _, it in group}
    stored: dict[int, float] = {}
    if latest is not None and min(steps) <= latest:  # else all new: the common case, no query
        stored = dict(conn.execute(sa.select(scores.c.step, scores.c.value).where(
            scores.c.job_id == job_id, scores.c.metric == metric, scores.c.step.in_(steps))).all())
    new: list[ScoreIn] = []
    duplicates = 0
    for i, item in group:
        if item.step in stored:
            if stored[item.step] != item.value:
                raise Conflict(f"scores[{i}]: step {item.step} of metric {metric!r} already has value "
                               f"{stored[item.step]!r}; got {item.value!r}. A stored score cannot change.")
            duplicates += 1
            continue
        if latest is not None and item.step < latest:
            raise Conflict(f"scores[{i}]: step {item.step} of metric {metric!r} is out of order: it comes "
                           f"after step {latest}. Send steps in increasing order.")
        new.append(item if item.metric == metric else item.model_copy(update={"metric": metric}))
        stored[item.step], latest = item.value, item.step
    return new, duplicates


def history(conn: Connection, job_id: str, metric: str, limit: int) -> list[ScoreIn]:
    """The job's stored scores of ``metric`` in step order (at most ``limit``; stored, so not
    validated again)."""
    cols = [scores.c[name] for name in ScoreIn.model_fields]
    query = (sa.select(*cols).where(scores.c.job_id == job_id, scores.c.metric == metric)
             .order_by(scores.c.step).limit(limit))
    return [ScoreIn.model_construct(**r) for r in conn.execute(query).mappings()]


def list_after(
    store: Store, job_id: str, tenant: str | None, *, metric: str | None, after_step: int, limit: int
) -> list[dict[str, Any]]:
    """The job's scores of ``metric`` (default: its watched one) after ``after_step``, in step order."""
    with store.reading() as conn:
        job = job_row(conn, job_id, tenant)
        cols = [scores.c[n] for n in ("metric", "step", "value", "checkpoint_uri", "progress", "loss",
                                      "ts", "received_at", "score_stderr")]
        query = (sa.select(*cols)
                 .where(scores.c.job_id == job_id, scores.c.metric == (metric or job["metric"]),
                        scores.c.step > after_step)
                 .order_by(scores.c.step).limit(limit))
        return [dict(r) for r in conn.execute(query).mappings().all()]
