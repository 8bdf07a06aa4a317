"""Score ingest: validate, store, decide, enqueue the stop, all in ONE transaction.

Rules (documented in the README):
- Idempotent on (job, metric, step): the same value again is a no-op success; a different value
  is a 409 naming the step. Nothing of the batch is written when any item is refused.
- Steps of one metric arrive in increasing order: a new step below the latest stored step is a
  409 (a detector's past decisions are never rewritten). Re-sending an old step is fine.
- Only the job's watched metric feeds the detector; other metrics are stored as evidence.
- The detector is stateless: it sees the whole stored history after each ingest. When it says
  STOP and the job has no detector decision yet (and no ``never_stop`` override), the decision
  is recorded and, unless the job or its tenant is in shadow mode, a stop is put in the outbox
  in the same transaction. A job is decided at most once (a unique constraint backs this).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from ..detectors import Detector, Eval, Verdict, parse_spec
from .errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from .store import Limits, Store, decisions, jobs, outbox, scores, tenants


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


@dataclass(frozen=True)
class HistoryItem:
    eval: Eval
    checkpoint_uri: str | None


def ingest_scores(
    store: Store, job_id: str, tenant: str | None, scores_in: Sequence[ScoreIn]
) -> IngestResult:
    """Store ``scores_in`` for the job and decide; raises a DomainError (nothing written) on refusal."""
    _validate(store.limits, scores_in)
    now = store.clock()
    result, history = store.write(lambda conn: _ingest(store, conn, job_id, tenant, scores_in, now))
    store.history_cache.put(job_id, history)  # only once committed
    return result


def _ingest(
    store: Store, conn: Connection, job_id: str, tenant: str | None, scores_in: Sequence[ScoreIn], now: float
) -> tuple[IngestResult, tuple[HistoryItem, ...]]:
    job = lock_job(conn, job_id, tenant)
    rows, duplicates, latest = _insert_new(conn, job, scores_in, now)
    history = _history(store, conn, job, rows, latest.get(job["metric"]))
    verdict = detector_for(job["detector"]).evaluate([h.eval for h in history])
    decided_now, note = False, verdict.reason
    if verdict.stopped and rows:
        decided_now, note = _maybe_decide(conn, job, verdict, history, now)
    current = conn.execute(sa.select(decisions.c.shadow, decisions.c.enforced)
                           .where(decisions.c.job_id == job_id)).all()
    state = job["state"]
    if decided_now:
        state = conn.execute(sa.select(jobs.c.state).where(jobs.c.id == job_id)).scalar_one()
    best_uri = history[verdict.best_index].checkpoint_uri if verdict.best_index is not None else None
    result = IngestResult(
        job_id=job_id, accepted=len(rows), duplicates=duplicates,
        decision="stop" if any(d.enforced for d in current) else "continue", state=state, reason=note,
        decided_now=decided_now, shadow_stop=any(d.shadow for d in current), stop_step=verdict.stop_step,
        n_evals=len(history), best_step=verdict.best_step, best_score=verdict.best_score,
        best_checkpoint_uri=best_uri,
    )
    return result, history


@lru_cache(maxsize=1024)
def detector_for(spec: str) -> Detector:
    return parse_spec(spec)


def lock_job(conn: Connection, job_id: str, tenant: str | None) -> RowMapping:
    """The job row joined with its tenant's shadow flag, locked for this transaction."""
    query = (sa.select(jobs, tenants.c.shadow.label("tenant_shadow"))
             .join(tenants, tenants.c.name == jobs.c.tenant).where(jobs.c.id == job_id)
             .with_for_update(of=jobs))
    if tenant is not None:
        query = query.where(jobs.c.tenant == tenant)
    row = conn.execute(query).mappings().first()
    if row is None:
        raise NotFound(f"Job {job_id!r} not found.")
    return row


def _history(
    store: Store, conn: Connection, job: RowMapping, rows: list[dict[str, Any]], latest: int | None
) -> tuple[HistoryItem, ...]:
    """The watched metric's history after this ingest: the cached history plus the new rows when
    the cache ends at the step that was latest in the database (steps only grow, so it is then
    complete), else read from the database."""
    cached = store.history_cache.get(job["id"])
    if cached is None or (cached[-1].eval.step if cached else None) != latest:
        return tuple(load_history(conn, job, store.limits.max_history))
    new = [HistoryItem(Eval(r["step"], r["value"], r["progress"], r["loss"]), r["checkpoint_uri"])
           for r in rows if r["metric"] == job["metric"]]
    return (cached + tuple(new))[: store.limits.max_history]


def load_history(conn: Connection, job: RowMapping, max_history: int) -> list[HistoryItem]:
    cols = (scores.c.step, scores.c.value, scores.c.progress, scores.c.loss, scores.c.checkpoint_uri)
    query = (sa.select(*cols)
             .where(scores.c.job_id == job["id"], scores.c.metric == job["metric"])
             .order_by(scores.c.step).limit(max_history))
    return [HistoryItem(Eval(r.step, r.value, r.progress, r.loss), r.checkpoint_uri)
            for r in conn.execute(query)]


def decide_stop(
    conn: Connection, job: RowMapping, source: str, verdict: Verdict, history: Sequence[HistoryItem],
    now: float, *, shadow: bool, reason: str,
) -> int:
    """Record a stop decision; unless ``shadow``, enqueue its enforcement and mark the job stopping."""
    best_uri = history[verdict.best_index].checkpoint_uri if verdict.best_index is not None else None
    decision_id = conn.execute(decisions.insert().values(
        job_id=job["id"], source=source, decision="stop", shadow=shadow, enforced=not shadow,
        reason=reason, detector=job["detector"],
        step=verdict.stop_step if source == "detector" else (history[-1].eval.step if history else None),
        n_evals=len(history), best_step=verdict.best_step, best_score=verdict.best_score,
        best_checkpoint_uri=best_uri, created_at=now,
    )).inserted_primary_key[0]  # type: ignore[index]
    if not shadow:
        conn.execute(outbox.insert().values(decision_id=decision_id, job_id=job["id"], phase="pin",
                                            attempts=0, next_attempt_at=now, created_at=now))
        conn.execute(jobs.update().where(jobs.c.id == job["id"]).values(state="stopping"))
    return int(decision_id)


def _maybe_decide(
    conn: Connection, job: RowMapping, verdict: Verdict, history: Sequence[HistoryItem], now: float
) -> tuple[bool, str]:
    if job["override"] == "never_stop":
        return False, f"{verdict.reason} at step {verdict.stop_step}; not stopped: never_stop override"
    if job["state"] != "running":
        return False, verdict.reason
    exists = conn.execute(sa.select(decisions.c.id).where(
        decisions.c.job_id == job["id"], decisions.c.source == "detector")).first()
    if exists:
        return False, verdict.reason
    shadow = bool(job["shadow"] or job["tenant_shadow"])
    decide_stop(conn, job, "detector", verdict, history, now, shadow=shadow, reason=verdict.reason)
    return True, verdict.reason + (" (shadow mode: recorded, not enforced)" if shadow else "")


def _insert_new(
    conn: Connection, job: RowMapping, items: Sequence[ScoreIn], now: float
) -> tuple[list[dict[str, Any]], int, dict[str, int | None]]:
    """Insert the new scores; return them, the number of duplicates, and per metric the latest
    step stored before this ingest."""
    by_metric: dict[str, list[tuple[int, ScoreIn]]] = {}
    for i, item in enumerate(items):
        by_metric.setdefault(item.metric or job["metric"], []).append((i, item))
    rows: list[dict[str, Any]] = []
    duplicates, latest = 0, {}
    for metric, group in by_metric.items():
        latest[metric] = conn.execute(sa.select(sa.func.max(scores.c.step)).where(
            scores.c.job_id == job["id"], scores.c.metric == metric)).scalar()
        new, dup = _new_rows(conn, job["id"], metric, group, now, latest[metric])
        rows += new
        duplicates += dup
    if rows:
        conn.execute(scores.insert(), rows)
    return rows, duplicates, latest


def _new_rows(
    conn: Connection, job_id: str, metric: str, group: list[tuple[int, ScoreIn]], now: float,
    latest: int | None,
) -> tuple[list[dict[str, Any]], int]:
    where = (scores.c.job_id == job_id, scores.c.metric == metric)
    steps = {it.step for _, it in group}
    stored: dict[int, float] = {}
    if latest is not None and min(steps) <= latest:  # else all new: the common case, no query
        stored = dict(conn.execute(sa.select(scores.c.step, scores.c.value)
                                   .where(*where, scores.c.step.in_(steps))).all())
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


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
