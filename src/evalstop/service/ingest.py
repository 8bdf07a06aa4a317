"""Score ingest: validate, store, decide, enqueue the stop, all in ONE transaction.

Rules (documented in the README):
- Idempotent on (job, metric, step): the same value again is a no-op success; a different value
  is a 409 naming the step. Nothing of the batch is written when any item is refused.
- On SQLite (one commit thread for every writer) a batch is written in units of
  ``Limits.ingest_chunk`` scores, in order, each in its own savepoint of a commit group, and
  answered after the last: another job's score then waits for one unit, not for a whole
  1,000-score batch. On PostgreSQL a batch is one transaction. Everything that can refuse an item
  is checked on the whole batch before the first unit (limits, finiteness, steps in order within
  the batch), and a unit can only conflict with stored scores when every earlier unit held old
  steps only, so a refused batch still writes nothing, except in one race: another request
  writing later steps to the same job between two units. Then the units before stay stored
  (valid scores; a retry reports them as duplicates).
- Steps of one metric arrive in increasing order: a new step below the latest stored step is a
  409 (a detector's past decisions are never rewritten). Re-sending an old step is fine.
- Only the job's watched metric feeds the detector; other metrics are stored as evidence.
- The job's ``Monitor`` (persisted on the job row, :mod:`.monitoring`) folds in the new scores
  and is written back in the same transaction: no request reads the score history. Once its
  rule has fired and the job has no detector decision yet (and no ``never_stop`` override), the
  decision is recorded and, unless the job or its tenant is in shadow mode, a stop is put in
  the outbox in the same transaction. A job is decided at most once (a unique constraint backs
  this).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.engine import Connection, RowMapping

from ..detectors import Monitor
from .errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from .monitoring import load_monitor, observe_rows, save_monitor
from .store import Limits, Store, decisions, jobs, outbox, scores, tenants

#: A job row as ingest reads it (a RowMapping, or a dict on the SQLite fast path).
JobRow = Mapping[Any, Any]


@dataclass(frozen=True)
class ScoreIn:
    """One eval score as a client or a puller reports it. ``metric`` None = the job's metric."""

    step: int
    value: float
    checkpoint_uri: str | None = None
    ts: float | None = None
    metric: str | None = None
    progress: float | None = None
    loss: float | None = None


@dataclass(frozen=True)
class IngestResult:
    """What the caller is told: the decision for the job now, and its best checkpoint so far."""

    job_id: str
    accepted: int
    duplicates: int
    decision: str  # "stop" once a stop is decided and enforced, else "continue"
    state: str
    reason: str
    decided_now: bool
    shadow_stop: bool
    stop_step: int | None
    n_evals: int
    best_step: int | None
    best_score: float | None
    best_checkpoint_uri: str | None


def ingest_scores(
    store: Store, job_id: str, tenant: str | None, scores_in: Sequence[ScoreIn]
) -> IngestResult:
    """Store ``scores_in`` for the job and decide; raises a DomainError (nothing written) on refusal."""
    return _merged([store.write(unit) for unit in _units(store, job_id, tenant, scores_in)])


async def ingest_scores_async(
    store: Store, job_id: str, tenant: str | None, scores_in: Sequence[ScoreIn]
) -> IngestResult:
    """:func:`ingest_scores` for an event loop: waits for the commit without holding a thread. A
    batch of more than one unit is checked in a worker thread, so the loop is not held up."""
    if len(scores_in) > store.limits.ingest_chunk:
        units = await asyncio.to_thread(_units, store, job_id, tenant, scores_in)
    else:
        units = _units(store, job_id, tenant, scores_in)
    return _merged([await store.write_async(unit) for unit in units])


def _units(
    store: Store, job_id: str, tenant: str | None, scores_in: Sequence[ScoreIn]
) -> list[Callable[[Connection], IngestResult]]:
    """Validate the whole batch now (refuse before queueing), and return its write units."""
    _validate(store.limits, scores_in)
    now = store.clock()
    # Units matter where every writer shares one commit thread (SQLite's group commit); on
    # PostgreSQL writers to different jobs do not wait for each other, and the batch stays one
    # transaction (fewer round trips).
    size = store.limits.ingest_chunk if store.committer is not None else max(len(scores_in), 1)
    chunks = [scores_in[i:i + size] for i in range(0, len(scores_in), size)]
    return [partial(_ingest_unit, store, job_id, tenant, part, now) for part in chunks]


def _ingest_unit(
    store: Store, job_id: str, tenant: str | None, part: Sequence[ScoreIn], now: float, conn: Connection
) -> IngestResult:
    return _ingest(store, conn, job_id, tenant, part, now)


def _merged(results: Sequence[IngestResult]) -> IngestResult:
    """One reply for a batch written in several units: counts summed, the job as the last unit
    left it, and the decision note of the unit that decided (if one did)."""
    last = results[-1]
    if len(results) == 1:
        return last
    deciding = next((r for r in results if r.decided_now), None)
    return replace(
        last, accepted=sum(r.accepted for r in results), duplicates=sum(r.duplicates for r in results),
        decided_now=deciding is not None, reason=last.reason if deciding is None else deciding.reason)


def _ingest(
    store: Store, conn: Connection, job_id: str, tenant: str | None, scores_in: Sequence[ScoreIn], now: float
) -> IngestResult:
    job = _read_job(store, conn, job_id, tenant)
    # Load (or rebuild from the stored history) before inserting, so a rebuild never sees the
    # new rows, which are observed once below.
    monitor = load_monitor(conn, job, store.limits.max_history)
    rows, duplicates = _insert_new(store, conn, job, scores_in, now)
    if observe_rows(monitor, rows, job["metric"]) or job.get("monitor_state") is None:
        save_monitor(conn, job_id, monitor, raw_sqlite=store.is_sqlite)
    verdict = monitor.verdict
    decided_now, note, state = False, verdict.reason, job["state"]
    enforced, shadow_stop = bool(job["enforced"]), bool(job["shadow_stop"])
    if verdict.stopped and rows:
        decided_now, note, shadow = _maybe_decide(conn, job, monitor, now, job["detector_decided"])
        if decided_now:
            enforced, shadow_stop = enforced or not shadow, shadow_stop or shadow
            state = state if shadow else "stopping"
    return IngestResult(
        job_id=job_id, accepted=len(rows), duplicates=duplicates,
        decision="stop" if enforced else "continue", state=state, reason=note,
        decided_now=decided_now, shadow_stop=shadow_stop, stop_step=verdict.stop_step,
        n_evals=monitor.n_evals + monitor.n_ignored, best_step=verdict.best_step,
        best_score=verdict.best_score, best_checkpoint_uri=monitor.best_checkpoint,
    )


# Statements of the ingest path, built once: SQLAlchemy then skips building the expression and
# its cache key on every request (a third of the per-request CPU before, by profile).
def _lock_query(scoped: bool) -> sa.Select[Any]:
    query = (sa.select(jobs, tenants.c.shadow.label("tenant_shadow"))
             .join(tenants, tenants.c.name == jobs.c.tenant).where(jobs.c.id == sa.bindparam("job_id"))
             .with_for_update(of=jobs))
    return query.where(jobs.c.tenant == sa.bindparam("tenant")) if scoped else query


_LOCK_JOB = {scoped: _lock_query(scoped) for scoped in (False, True)}


def _job_state(job_id: Any, metric: Any) -> list[sa.ColumnElement[Any]]:
    """What ingest needs to know besides the job row: the watched metric's latest stored step,
    and which decisions the job has."""
    def decided(*where: sa.ColumnElement[bool]) -> sa.Exists:
        return sa.exists().where(decisions.c.job_id == job_id, *where)

    latest = sa.select(sa.func.max(scores.c.step)).where(scores.c.job_id == job_id, scores.c.metric == metric)
    return [latest.scalar_subquery().label("latest"),
            decided(decisions.c.enforced.is_(True)).label("enforced"),
            decided(decisions.c.shadow.is_(True)).label("shadow_stop"),
            decided(decisions.c.source == "detector").label("detector_decided")]


#: PostgreSQL: read AFTER the row lock is granted, in a second statement, so that (read
#: committed) it sees every commit made before the lock.
_JOB_STATE = sa.select(*_job_state(sa.bindparam("job_id"), sa.bindparam("metric")))
_INSERT_SCORES = scores.insert()
_SCORE_COLUMNS = ("job_id", "metric", "step", "value", "checkpoint_uri", "progress", "loss", "ts",
                  "received_at")
_COPY_SCORES = f"COPY scores ({', '.join(_SCORE_COLUMNS)}) FROM STDIN"


class _SqliteStatements:
    """The ingest path's statements as SQLite SQL, run on the driver connection: a SQLAlchemy
    ``execute`` cost ~40 us of CPU against ~7 us for the same statement on the sqlite3 cursor,
    and the group commit runs every unit on one thread (profile: a third of its time). On SQLite
    the transaction already holds the write lock (BEGIN IMMEDIATE), so the job row, its latest
    step and its decisions are read in ONE statement."""

    def __init__(self) -> None:
        dialect = sqlite_dialect()
        self.read = {scoped: self._compile(self._read(scoped), dialect) for scoped in (False, True)}
        self.insert = (f"INSERT INTO scores ({', '.join(_SCORE_COLUMNS)}) "
                       f"VALUES ({', '.join('?' for _ in _SCORE_COLUMNS)})")

    @staticmethod
    def _read(scoped: bool) -> sa.Select[Any]:
        names = ("id", "metric", "detector", "state", "override", "shadow", "monitor_state")
        cols = [jobs.c[n] for n in names]
        state = _job_state(jobs.c.id, jobs.c.metric)
        query = (sa.select(*cols, tenants.c.shadow.label("tenant_shadow"), *state)
                 .join(tenants, tenants.c.name == jobs.c.tenant).where(jobs.c.id == sa.bindparam("job_id")))
        return query.where(jobs.c.tenant == sa.bindparam("tenant")) if scoped else query

    @staticmethod
    def _compile(query: sa.Select[Any], dialect: Any) -> tuple[str, tuple[str, ...], dict[str, Any]]:
        compiled = query.compile(dialect=dialect)
        return compiled.string, tuple(compiled.positiontup or ()), dict(compiled.params)

    def read_job(self, raw: Any, job_id: str, tenant: str | None) -> dict[str, Any] | None:
        sql, names, defaults = self.read[tenant is not None]
        given = {"job_id": job_id, "tenant": tenant}
        cursor = raw.execute(sql, [given[n] if n in given else defaults[n] for n in names])
        row = cursor.fetchone()
        return None if row is None else dict(zip((d[0] for d in cursor.description), row, strict=True))


_SQLITE = _SqliteStatements()


def _read_job(store: Store, conn: Connection, job_id: str, tenant: str | None) -> JobRow:
    """The job row (locked for this transaction), its tenant's shadow flag, and :func:`_job_state`."""
    if store.is_sqlite:
        job = _SQLITE.read_job(conn.connection.driver_connection, job_id, tenant)
        if job is None:
            raise NotFound(f"Job {job_id!r} not found.")
        return job
    row = lock_job(conn, job_id, tenant)
    return {**row, **conn.execute(_JOB_STATE, {"job_id": job_id, "metric": row["metric"]}).one()._mapping}


def lock_job(conn: Connection, job_id: str, tenant: str | None) -> RowMapping:
    """The job row joined with its tenant's shadow flag, locked for this transaction."""
    params = {"job_id": job_id} if tenant is None else {"job_id": job_id, "tenant": tenant}
    row = conn.execute(_LOCK_JOB[tenant is not None], params).mappings().first()
    if row is None:
        raise NotFound(f"Job {job_id!r} not found.")
    return row


def decide_stop(
    conn: Connection, job: JobRow, source: str, monitor: Monitor, now: float, *, shadow: bool, reason: str,
    step: int | None,
) -> int:
    """Record a stop decision at ``step``, with the monitor's best checkpoint; unless
    ``shadow``, enqueue its enforcement and mark the job stopping."""
    verdict = monitor.verdict
    decision_id = conn.execute(decisions.insert().values(
        job_id=job["id"], source=source, decision="stop", shadow=shadow, enforced=not shadow,
        reason=reason, detector=job["detector"], step=step,
        n_evals=monitor.n_evals + monitor.n_ignored, best_step=verdict.best_step,
        best_score=verdict.best_score, best_checkpoint_uri=monitor.best_checkpoint, created_at=now,
    )).inserted_primary_key[0]  # type: ignore[index]
    if not shadow:
        conn.execute(outbox.insert().values(decision_id=decision_id, job_id=job["id"], phase="pin",
                                            attempts=0, next_attempt_at=now, created_at=now))
        conn.execute(jobs.update().where(jobs.c.id == job["id"]).values(state="stopping"))
    return int(decision_id)


def _maybe_decide(
    conn: Connection, job: JobRow, monitor: Monitor, now: float, decided: bool
) -> tuple[bool, str, bool]:
    """Decide the stop the rule asks for unless the job has a detector decision (``decided``)
    already; return whether it was decided now, the reason to report, and whether it is shadow."""
    verdict = monitor.verdict
    if job["override"] == "never_stop":
        return False, f"{verdict.reason} at step {verdict.stop_step}; not stopped: never_stop override", False
    if job["state"] != "running" or decided:
        return False, verdict.reason, False
    shadow = bool(job["shadow"] or job["tenant_shadow"])
    decide_stop(conn, job, "detector", monitor, now, shadow=shadow, reason=verdict.reason,
                step=verdict.stop_step)
    return True, verdict.reason + (" (shadow mode: recorded, not enforced)" if shadow else ""), shadow


def _insert_new(
    store: Store, conn: Connection, job: JobRow, items: Sequence[ScoreIn], now: float
) -> tuple[list[dict[str, Any]], int]:
    """Insert the new scores; return them and the number of duplicates. ``job["latest"]`` is
    the latest stored step of the job's watched metric (other metrics are looked up here)."""
    watched_latest = job["latest"]
    by_metric: dict[str, list[tuple[int, ScoreIn]]] = {}
    for i, item in enumerate(items):
        by_metric.setdefault(item.metric or job["metric"], []).append((i, item))
    rows: list[dict[str, Any]] = []
    duplicates = 0
    for metric, group in by_metric.items():
        latest = watched_latest if metric == job["metric"] else conn.execute(
            sa.select(sa.func.max(scores.c.step)).where(
                scores.c.job_id == job["id"], scores.c.metric == metric)).scalar()
        new, dup = _new_rows(conn, job["id"], metric, group, now, latest)
        rows += new
        duplicates += dup
    if rows and store.is_sqlite:
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.executemany(_SQLITE.insert, [tuple(r[c] for c in _SCORE_COLUMNS) for r in rows])
    elif rows and conn.dialect.driver == "psycopg":
        # COPY: one statement for the unit (executemany sends one INSERT per row, and the
        # server's per-statement work was most of a 100-score unit, by profile)
        raw = conn.connection.driver_connection
        with raw.cursor() as cursor, cursor.copy(_COPY_SCORES) as copy:  # type: ignore[union-attr]
            for r in rows:
                copy.write_row(tuple(r[c] for c in _SCORE_COLUMNS))
    elif rows:
        conn.execute(_INSERT_SCORES, rows)
    return rows, duplicates


def _new_rows(
    conn: Connection, job_id: str, metric: str, group: list[tuple[int, ScoreIn]], now: float,
    latest: int | None,
) -> tuple[list[dict[str, Any]], int]:
    steps = {it.step for _, it in group}
    stored: dict[int, float] = {}
    if latest is not None and min(steps) <= latest:  # else all new: the common case, no query
        stored = dict(conn.execute(sa.select(scores.c.step, scores.c.value).where(
            scores.c.job_id == job_id, scores.c.metric == metric, scores.c.step.in_(steps))).all())
    rows, duplicates = [], 0
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
        rows.append({"job_id": job_id, "metric": metric, "step": item.step, "value": item.value,
                     "checkpoint_uri": item.checkpoint_uri, "progress": item.progress, "loss": item.loss,
                     "ts": item.ts, "received_at": now})
        stored[item.step], latest = item.value, item.step
    return rows, duplicates


def _validate(limits: Limits, items: Sequence[ScoreIn]) -> None:
    if not items:
        raise InvalidInput("scores: at least one score is required.")
    if len(items) > limits.max_batch:
        raise PayloadTooLarge(f"scores: a batch holds at most {limits.max_batch} scores. Got {len(items)}.")
    for i, item in enumerate(items):
        step_ok = isinstance(item.step, int) and not isinstance(item.step, bool)
        if not (step_ok and 0 <= item.step <= limits.max_step):
            raise InvalidInput(
                f"scores[{i}].step must be an int in [0, {limits.max_step}]. Got {item.step!r}.")
        for name in ("value", "ts", "progress", "loss"):
            value = getattr(item, name)
            if (value is not None or name == "value") and not _finite(value):
                raise InvalidInput(f"scores[{i}].{name} must be a finite number. Got {value!r}.")
        if item.metric is not None and not 0 < len(item.metric) <= 200:
            raise InvalidInput(f"scores[{i}].metric must be 1-200 characters. Got {item.metric!r}.")
    _check_order(items)


def _check_order(items: Sequence[ScoreIn]) -> None:
    """Steps of one metric in increasing order within the batch (a repeat must repeat the value),
    so that no unit after the first is refused for the batch's own order (module docstring)."""
    last: dict[str | None, ScoreIn] = {}
    for i, item in enumerate(items):
        before = last.get(item.metric)
        if before is not None and item.step < before.step:
            raise Conflict(f"scores[{i}]: step {item.step} of metric {item.metric or 'watched'!r} is out of "
                           f"order: it comes after step {before.step}. Send steps in increasing order.")
        if before is not None and item.step == before.step and item.value != before.value:
            raise Conflict(f"scores[{i}]: step {item.step} of metric {item.metric or 'watched'!r} appears "
                           f"twice with values {before.value!r} and {item.value!r}.")
        last[item.metric] = item


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
