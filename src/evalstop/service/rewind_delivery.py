"""The worker's part of a resubmitting rewind (``resubmit.py``): after the running attempt is
stopped, submit the next one and record where it runs, fenced like every outbox write."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import lifecycle
from .actors import Actor, record
from .adapters import AdapterError, EnforcementAdapter, JobRef, backend
from .resubmit import render
from .store import Conn, Store
from .store import decision as decision_store
from .store import rewound as rewound_store

WORKER = Actor(None, name="evalstop worker", channel="worker")


def rewind_of(store: Store, decision_id: int) -> tuple[int, str] | None:
    """``(rewind number, correction)`` when the outbox row's decision is a rewind, else None."""
    with store.reading() as conn:
        found = rewound_store.decision_kind(conn, decision_id)
    if found is None or found[0] != "rewind":
        return None
    return int(found[1].rpartition("-")[2]), found[2]


def stop_decided(store: Store, job_id: str) -> bool:
    """Whether an enforced stop was decided for the job (``stop_now``, say): it cancels the
    resubmission, and the job ends stopped by that stop's own delivery."""
    with store.reading() as conn:
        return rewound_store.stop_decided(conn, job_id)


def submit(
    adapter: EnforcementAdapter, ref: JobRef, job: Mapping[Any, Any], uri: str | None, rewind: tuple[int, str]
) -> str:
    """Render the job's template with the checkpoint and correction, and resubmit it; the new
    reference. A value that cannot be rendered is a permanent error."""
    template = dict(job["resubmit"] or {})
    rules = backend(job["target"])
    text = template.get(rules.resubmit_text) if rules is not None and rules.resubmit_text else None
    if not isinstance(text, str):
        raise AdapterError(f"job {job['id']}: no resubmission template", retryable=False)
    number, correction = rewind
    try:
        rendered = render(text, uri, correction)
    except ValueError as exc:
        raise AdapterError(f"job {job['id']}: {exc}", retryable=False) from None
    return adapter.resubmit(ref, template, rendered, number)


def record_new_ref(
    conn: Conn, job: Mapping[Any, Any], decision_id: int, old_ref: str, new_ref: str, number: int, now: float
) -> None:
    """The same job row now runs as ``new_ref`` (attempt ``number``); the decision and the audit
    trail say so. In the worker's fenced transaction."""
    lifecycle.move(conn, job["id"], lifecycle.RUNNING, now, external_ref=new_ref)  # also after a retry
    decision_store.set_new_ref(conn, decision_id, new_ref)
    why = f"rewind {number}: {job['target']} job {old_ref!r} stopped; attempt {number} is {new_ref!r}"
    record(conn, job["id"], WORKER, "resubmit", why[:1000], now)
