"""Score ingest: validate, store, decide, enqueue the stop, all in ONE transaction.

Rules (documented in the README):
- Idempotent on (job, metric, step): the same value again is a no-op success; a different value
  is a 409 naming the step. Nothing of the batch is written when any item is refused.
- On SQLite (one commit thread for every writer) a batch is written in units of
  ``Limits.ingest_chunk`` scores, in order, each in its own savepoint of a commit group, and
  answered after the last: another job's score then waits for one unit, not for a whole
  1,000-score batch. On PostgreSQL a batch is one transaction. Everything that can refuse an item
  is checked on the whole batch before the first unit (each :class:`ScoreIn` was validated when
  built; here the limits and the steps' order within the batch), and a unit can only conflict
  with stored scores when every earlier unit held old steps only, so a refused batch still
  writes nothing, except in one race: another request writing later steps to the same job
  between two units. Then the units before stay stored
  (valid scores; a retry reports them as duplicates).
- Steps of one metric arrive in increasing order: a new step below the latest stored step is a
  409 (a detector's past decisions are never rewritten). Re-sending an old step is fine. Within
  a batch the order is checked on the scores that will be judged: those of the job's current
  attempt. A batch that names attempts may hold a late score of an earlier attempt at a higher
  step than the current attempt's (``[attempt 0 step 7, attempt 1 step 2]``): the earlier
  attempt's score is dropped and listed in the reply's ``stale``, the current one is judged.
- Only the job's watched metric feeds the detector; other metrics are stored as evidence.
- The job's ``Monitor`` (persisted on the job row, :mod:`.monitoring`) folds in the new scores
  and is written back in the same transaction: no request reads the score history. Once its
  rule has fired and the job has no detector decision yet (and no ``never_stop`` override), the
  decision is recorded and, unless the job or its tenant is in shadow mode, a stop is put in
  the outbox in the same transaction. A job is decided at most once (a unique constraint backs
  this).
- A job under a rewind policy (:mod:`.rewind`): a detection with a rewind left records a
  ``rewind`` decision, rewinds the monitor and answers ``decision: "rewind"`` with the
  checkpoint and the correction; scores of an earlier attempt are dropped (their indexes in the
  reply's ``stale``), and a request that held nothing else is answered with the rewind again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from ..detectors import Monitor
from . import lifecycle
from . import rewind as rewinding
from .errors import Conflict, InvalidInput, PayloadTooLarge
from .monitoring import MEMO, decision_of, load_monitor, observe_new, stored_text
from .score import ScoreIn
from .store import Conn, Limits, Store
from .store import decision as decision_store
from .store import job as job_store
from .store import score as score_store

#: A job row as ingest reads it (a mapping of the job's columns).
JobRow = Mapping[Any, Any]
__all__ = ["IngestResult", "ScoreIn", "decide_stop", "ingest_scores", "ingest_scores_async"]


@dataclass(frozen=True)
class IngestResult:
    """What the caller is told: the decision for the job now, and its best checkpoint so far."""

    job_id: str
    accepted: int
    duplicates: int
    #: "stop" once a stop is decided and enforced; "rewind" when the job must go back to its
    #: best checkpoint (decided now, or the scores were of an earlier attempt); else "continue"
    decision: str
    state: str
    reason: str
    decided_now: bool
    shadow_stop: bool
    stop_step: int | None
    n_evals: int
    best_step: int | None
    best_score: float | None
    best_checkpoint_uri: str | None
    #: CPU seconds the job's rule took on this request (load, fold in, serialise its state);
    #: charged to the tenant's bucket after the reply is known (not part of the reply).
    rule_cpu_s: float = 0.0
    #: ``NextEval.to_dict()`` after these scores; None once a stop is enforced or the job no longer runs
    next_eval: dict[str, Any] | None = None
    #: the job's attempt now (the rewinds it has had), and with ``decision == "rewind"`` the
    #: rewind to do: number, step, to_step, checkpoint_uri, correction, reason (:mod:`.rewind`)
    attempt: int = 0
    rewind: dict[str, Any] | None = None
    #: the request's scores (indexes) of an earlier attempt: not stored, not judged (also
    #: counted in ``duplicates``)
    stale: tuple[int, ...] = ()


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
) -> list[Callable[[Conn], IngestResult]]:
    """Validate the whole batch now (refuse before queueing), and return its write units."""
    _validate(store.limits, scores_in)
    now = store.clock()
    # Units matter where every writer shares one commit thread (SQLite's group commit); on
    # PostgreSQL writers to different jobs do not wait for each other, and the batch stays one
    # transaction (fewer round trips).
    size = store.limits.ingest_chunk if store.committer is not None else max(len(scores_in), 1)
    batch = Batch(scores_in)
    return [partial(_ingest_unit, store, job_id, tenant, scores_in[i:i + size], i, now, batch)
            for i in range(0, len(scores_in), size)]


@dataclass
class Batch:
    """A request's scores as its units share them: the job's attempt when the first unit ran
    (:mod:`.rewind`), set by that unit, which also checks the order of the scores it will judge."""

    items: Sequence[ScoreIn]
    attempt: int | None = None

    def begin(self, attempt: int) -> int:
        """The batch's attempt (``attempt``, the job's now, if this is its first unit)."""
        if self.attempt is None:
            self.attempt = attempt
            if any(item.attempt is not None for item in self.items):  # else checked by _validate
                kept, stale = rewinding.split_stale(self.items, attempt, attempt)
                dropped = set(stale)
                _check_order(kept, [i for i in range(len(self.items)) if i not in dropped])
        return self.attempt


def _ingest_unit(
    store: Store, job_id: str, tenant: str | None, part: Sequence[ScoreIn], offset: int, now: float,
    batch: Batch, conn: Conn
) -> IngestResult:
    return _ingest(store, conn, job_id, tenant, part, now, batch, offset)


def _merged(results: Sequence[IngestResult]) -> IngestResult:
    """One reply for a batch written in several units: counts summed, the job as the last unit
    left it, and the decision note of the unit that decided (if one did)."""
    last = results[-1]
    if len(results) == 1:
        return last
    deciding = next((r for r in results if r.decided_now), None)
    rewound = next((r for r in results if r.decision == "rewind"), None)
    merged = replace(
        last, accepted=sum(r.accepted for r in results), duplicates=sum(r.duplicates for r in results),
        decided_now=deciding is not None, reason=last.reason if deciding is None else deciding.reason,
        rule_cpu_s=sum(r.rule_cpu_s for r in results), stale=tuple(i for r in results for i in r.stale))
    if rewound is not None and last.decision != "stop":
        merged = replace(merged, decision="rewind", rewind=rewound.rewind)
    return merged


def _ingest(
    store: Store, conn: Conn, job_id: str, tenant: str | None, scores_in: Sequence[ScoreIn], now: float,
    batch: Batch | None = None, offset: int = 0,
) -> IngestResult:
    job = job_store.read_for_ingest(store, conn, job_id, tenant)
    # Load (or rebuild from the stored history) before inserting, so a rebuild never sees the
    # new rows, which are observed once below.
    started = time.thread_time()
    monitor = load_monitor(conn, job, store.limits.max_history)
    rule_cpu_s = time.thread_time() - started
    began = monitor.n_rewinds if batch is None else batch.begin(monitor.n_rewinds)
    scores_in, stale = rewinding.split_stale(scores_in, monitor.n_rewinds, began, offset)
    new, duplicates = score_store.new_scores(conn, job, scores_in)
    started = time.thread_time()
    changed = observe_new(monitor, new, job["metric"]) or job.get("monitor_state") is None
    text = stored_text(monitor) if changed else job["monitor_state"]
    rule_cpu_s += time.thread_time() - started
    score_store.write(store, conn, job_id, new, now, text if changed else None)
    verdict = monitor.verdict
    decided_now, note, state = False, verdict.reason, job["state"]
    enforced, shadow_stop = bool(job["enforced"]), bool(job["shadow_stop"])
    rewind: dict[str, Any] | None = None
    if verdict.stopped and new:
        decided_now, note, shadow = _maybe_decide(conn, job, monitor, now, job["detector_decided"])
        if decided_now and monitor.policy.on_detect == "rewind" and not shadow:  # rewound, or stopped instead
            rewind = rewinding.rewind_now(conn, job, monitor, now) if monitor.action == "rewind" else None
            text = stored_text(monitor)
            score_store.write(store, conn, job_id, (), now, text)
            verdict = monitor.verdict
        elif decided_now:
            text = None  # not written again after the decision: keep nothing (decoded next time)
        if decided_now and rewind is None:
            enforced, shadow_stop = enforced or not shadow, shadow_stop or shadow
            state = state if shadow else lifecycle.STOPPING
    result = IngestResult(
        job_id=job_id, accepted=len(new), duplicates=duplicates + len(stale),
        decision="rewind" if rewind else "stop" if enforced else "continue", state=state, reason=note,
        decided_now=decided_now, shadow_stop=shadow_stop, stop_step=verdict.stop_step,
        n_evals=monitor.n_evals + monitor.n_ignored, best_step=verdict.best_step,
        best_score=verdict.best_score, best_checkpoint_uri=monitor.best_checkpoint, rule_cpu_s=rule_cpu_s,
        next_eval=None if enforced or state != lifecycle.RUNNING else monitor.next_eval().to_dict(),
        attempt=monitor.n_rewinds, rewind=rewind, stale=tuple(stale),
    )
    if text is not None:  # the monitor is as stored (``text``) and nothing changes it any more
        MEMO.keep(job_id, job["detector"], text, monitor)
    if stale and not scores_in:  # nothing of the current attempt: the rewind again
        return rewinding.stale_reply(conn, job, result, monitor, len(stale))
    return result


def decide_stop(
    conn: Conn, job: JobRow, source: str, monitor: Monitor, now: float, *, shadow: bool, reason: str,
    step: int | None,
) -> int:
    """Record a stop decision at ``step``, with the monitor's best checkpoint; unless
    ``shadow``, enqueue its enforcement and mark the job stopping."""
    decision = decision_of(job, monitor, source=source, shadow=shadow, reason=reason, step=step)
    decision_id = decision_store.record_stop(conn, job["id"], now, decision, enqueue=not shadow)
    if not shadow:
        lifecycle.move(conn, job, lifecycle.STOPPING, now)
    return decision_id


def _maybe_decide(
    conn: Conn, job: JobRow, monitor: Monitor, now: float, decided: bool
) -> tuple[bool, str, bool]:
    """Decide the stop the rule asks for unless the job has a detector decision (``decided``)
    already; return whether it was decided now, the reason to report, and whether it is shadow."""
    verdict = monitor.verdict
    if job["override"] == "never_stop":
        return False, f"{verdict.reason} at step {verdict.stop_step}; not stopped: never_stop override", False
    if job["state"] != lifecycle.RUNNING or decided:
        return False, verdict.reason, False
    shadow = bool(job["shadow"] or job["tenant_shadow"])
    if monitor.action == "rewind" and not shadow and not rewinding.can_rewind(conn, job, monitor):
        monitor.stop_instead()
    if monitor.action == "rewind":
        if shadow:  # recorded as the job's one detector decision; the monitor is not rewound
            decision = decision_of(job, monitor, source="detector", shadow=True, reason=verdict.reason[:1000],
                                   step=verdict.stop_step, correction=monitor.policy.correction)
            decision_store.record_rewind(conn, job["id"], now, decision, enqueue=False)
            return True, rewinding.shadow_note(monitor), True
        note = f"{verdict.reason}; rewound to step {verdict.best_step} ({monitor.policy.correction})"
        return True, note, False
    decide_stop(conn, job, "detector", monitor, now, shadow=shadow, reason=verdict.reason,
                step=verdict.stop_step)
    return True, verdict.reason + (" (shadow mode: recorded, not enforced)" if shadow else ""), shadow


def _validate(limits: Limits, items: Sequence[ScoreIn]) -> None:
    """What a :class:`ScoreIn` cannot check by itself: the batch size, the configured
    ``max_step``, and the order of steps within the batch."""
    if not items:
        raise InvalidInput("scores: at least one score is required.")
    if len(items) > limits.max_batch:
        raise PayloadTooLarge(f"scores: a batch holds at most {limits.max_batch} scores. Got {len(items)}.")
    for i, item in enumerate(items):
        if item.step > limits.max_step:
            raise InvalidInput(
                f"scores[{i}].step must be an int in [0, {limits.max_step}]. Got {item.step!r}.")
    if all(item.attempt is None for item in items):  # else the first unit checks (``Batch.begin``)
        _check_order(items)


def _check_order(items: Sequence[ScoreIn], indexes: Sequence[int] | None = None) -> None:
    """Steps of one metric in increasing order among the scores to judge (a repeat must repeat
    the value; ``indexes``: their places in the request), so that no unit after the first is
    refused for the batch's own order (module docstring)."""
    last: dict[str | None, ScoreIn] = {}
    for i, item in zip(indexes or range(len(items)), items, strict=True):
        before = last.get(item.metric)
        if before is not None and item.step < before.step:
            raise Conflict(f"scores[{i}]: step {item.step} of metric {item.metric or 'watched'!r} is out of "
                           f"order: it comes after step {before.step}. Send steps in increasing order.")
        if before is not None and item.step == before.step and item.value != before.value:
            raise Conflict(f"scores[{i}]: step {item.step} of metric {item.metric or 'watched'!r} appears "
                           f"twice with values {before.value!r} and {item.value!r}.")
        last[item.metric] = item
