"""A job's lifecycle: its states, the transitions allowed between them, and :func:`move`, the only
code that changes a job's state (tests/service/test_lifecycle.py scans the service for any other).

    running --(enforced stop decided)--> stopping --(stop delivered)--> stopped
       |                                  |   ^                            ^
       | (a rewind's delivery             |   | (retry)                    | (release)
       |  failed for good)                v   |                            |
       +------------------------------> stop_failed -----------------------+

and ``stopping -> running`` when a retried rewind resubmits the job. A job is registered
``running``. Moving a job to the state it is in is not a transition: it is allowed, and only the
other columns given change (a resubmission records its new reference that way).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import Conflict
from .store import Conn
from .store import job as job_store

RUNNING, STOPPING, STOPPED, STOP_FAILED = "running", "stopping", "stopped", "stop_failed"
#: Every state a job row holds.
STATES = (RUNNING, STOPPING, STOPPED, STOP_FAILED)
#: The state of a newly registered job.
INITIAL = RUNNING
#: What readers show besides :data:`STATES`: ``released`` is a ``stopped`` job with no delivered
#: stop (released by hand after its stop failed); it is derived, never stored.
RELEASED = "released"
SHOWN = (RUNNING, STOPPING, STOPPED, RELEASED, STOP_FAILED)

#: ``(from, to)`` -> what moves a job along it.
TRANSITIONS: Mapping[tuple[str, str], str] = {
    (RUNNING, STOPPING): "an enforced stop is decided (by the rule, or a stop_now override)",
    (RUNNING, STOP_FAILED): "a rewind's delivery failed for good",
    (STOPPING, STOPPED): "the stop was delivered",
    (STOPPING, STOP_FAILED): "the stop's delivery failed for good",
    (STOPPING, RUNNING): "a retried rewind resubmitted the job",
    (STOP_FAILED, STOPPING): "an operator retries the failed stop",
    (STOP_FAILED, STOPPED): "an operator releases the job",
}


class IllegalTransition(Conflict):
    """A state change the lifecycle does not allow (409 when a request asked for it)."""


def allowed_from(state: str) -> tuple[str, ...]:
    """The states a job in ``state`` may move to."""
    return tuple(to for (origin, to) in TRANSITIONS if origin == state)


def check(job_id: str, current: str, to: str) -> None:
    """Raise :class:`IllegalTransition`, naming both states, unless ``current -> to`` is allowed."""
    if to not in STATES:
        raise IllegalTransition(f"Job {job_id}: {to!r} is not a job state; one of {', '.join(STATES)}.")
    if current != to and (current, to) not in TRANSITIONS:
        onward = ", ".join(allowed_from(current)) or "none (it is final)"
        raise IllegalTransition(
            f"Job {job_id} cannot go from {current} to {to}; from {current} it may go to: {onward}.")


def move(conn: Conn, job: str | Mapping[Any, Any], to: str, now: float, **columns: Any) -> None:
    """Move the job to ``to`` in the caller's transaction, with any other ``columns`` in the same
    update; entering ``stopped`` stamps ``stopped_at`` with ``now``. ``job`` is the job row the
    caller holds locked in this transaction (its ``state`` is current), or a job id: then the
    row is locked and read here."""
    if isinstance(job, str):
        job_id, current = job, job_store.lock(conn, job, None)["state"]
    else:
        job_id, current = job["id"], job["state"]
    check(job_id, current, to)
    if to == STOPPED and current != STOPPED:
        columns["stopped_at"] = now
    job_store.set_state(conn, job_id, to, **columns)
