"""Scores a rewind discarded: the steps after the best eval move from ``scores`` to
``rewound_scores`` (kept as evidence), so the next attempt may report the same steps again."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import NotFound
from .tables import decisions, jobs, rewound_scores, scores, tenants

MOVED = ("job_id", "metric", "step", "value", "checkpoint_uri", "score_stderr", "received_at")


def move_after(conn: Connection, job_id: str, after_step: int, attempt: int, now: float) -> int:
    """Move the job's scores (every metric) with a step after ``after_step`` to
    ``rewound_scores`` as attempt ``attempt``; return how many. Runs once per rewind."""
    later = sa.and_(scores.c.job_id == job_id, scores.c.step > after_step)
    chosen = sa.select(*(scores.c[c] for c in MOVED), sa.literal(attempt), sa.literal(now)).where(later)
    conn.execute(rewound_scores.insert().from_select([*MOVED, "attempt", "rewound_at"], chosen))
    return int(conn.execute(scores.delete().where(later)).rowcount or 0)


def tenant_default(conn: Connection, tenant: str) -> Any:
    """The tenant's default on-detect policy as stored (None: stop); NotFound for no tenant."""
    found = conn.execute(sa.select(tenants.c.on_detect).where(tenants.c.name == tenant)).first()
    if found is None:
        raise NotFound(f"Tenant {tenant!r} not found.")
    return found.on_detect


def resubmit_of(conn: Connection, job_id: str) -> Any:
    """The job's resubmission template (None: it rewinds in place). Read at a rewind only."""
    return conn.execute(sa.select(jobs.c.resubmit).where(jobs.c.id == job_id)).scalar()


def stop_decided(conn: Connection, job_id: str) -> bool:
    """Whether the job has an enforced stop decision."""
    d = decisions.c
    found = conn.execute(sa.select(d.id).where(d.job_id == job_id, d.decision == "stop", d.enforced.is_(True))
                         .limit(1))
    return found.first() is not None


def decision_kind(conn: Connection, decision_id: int) -> tuple[str, str, str] | None:
    """``(decision, source, correction)`` of a decision, or None."""
    found = conn.execute(sa.select(decisions.c.decision, decisions.c.source, decisions.c.correction)
                         .where(decisions.c.id == decision_id)).first()
    return None if found is None else (str(found.decision), str(found.source), str(found.correction or ""))
