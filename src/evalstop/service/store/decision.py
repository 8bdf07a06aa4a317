"""The decisions aggregate: write a stop decision and, when it is enforced, enqueue its stop
(its outbox row; the caller moves the job to ``stopping`` in the same transaction); write a
rewind decision (and, for a job that is resubmitted, its outbox row); read a job's decisions."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .engine import Store
from .job import row as job_row
from .tables import decisions, outbox


@dataclass(frozen=True)
class Decision:
    """A decision's row in ``decisions`` besides its id, job and time: what decided it
    (``source``: ``detector``, ``override``, ``rewind-N``), whether it is only recorded
    (``shadow``; else enforced), why, and the rule's state when it was taken."""

    source: str
    shadow: bool
    reason: str
    detector: str
    step: int | None
    n_evals: int
    best_step: int | None
    best_score: float | None
    best_checkpoint_uri: str | None
    correction: str | None = None  # a rewind's

    def values(self) -> dict[str, Any]:
        return {**asdict(self), "enforced": not self.shadow}


def record_stop(conn: Connection, job_id: str, now: float, decision: Decision, *, enqueue: bool) -> int:
    """Insert a stop decision and, if ``enqueue``, its outbox row (the job's state is the
    caller's: ``service/lifecycle.py``). Returns the decision id."""
    return _record(conn, job_id, now, "stop", decision, enqueue)


def record_rewind(conn: Connection, job_id: str, now: float, decision: Decision, *, enqueue: bool) -> int:
    """Insert a rewind decision (its ``source`` is ``rewind-N``, or ``detector`` in shadow
    mode) and, if ``enqueue`` (the job is resubmitted on its engine), its outbox row; the job
    stays ``running`` (its next attempt reports to it). Returns its id."""
    return _record(conn, job_id, now, "rewind", decision, enqueue)


def _record(conn: Connection, job_id: str, now: float, kind: str, decision: Decision, enqueue: bool) -> int:
    decision_id = conn.execute(decisions.insert().values(
        job_id=job_id, decision=kind, created_at=now, **decision.values())).inserted_primary_key[0]  # type: ignore[index]
    if enqueue:
        conn.execute(outbox.insert().values(decision_id=decision_id, job_id=job_id, phase="pin",
                                            attempts=0, next_attempt_at=now, created_at=now))
    return int(decision_id)


def set_new_ref(conn: Connection, decision_id: int, new_ref: str) -> None:
    """Record the reference a resubmission got (the audit of where the next attempt runs)."""
    conn.execute(decisions.update().where(decisions.c.id == decision_id).values(new_ref=new_ref))


def list_for(store: Store, job_id: str, tenant: str | None) -> list[dict[str, Any]]:
    with store.reading() as conn:
        job_row(conn, job_id, tenant)
        query = sa.select(decisions).where(decisions.c.job_id == job_id).order_by(decisions.c.id)
        return [dict(r) for r in conn.execute(query).mappings().all()]
