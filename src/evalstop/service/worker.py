"""The outbox worker: delivers each decided stop through the job's adapter.

Each outbox row walks ``pin -> signal -> grace -> hard_stop -> reconcile -> done``. Every phase
change is committed before the next adapter call, so after a crash the row resumes where it
stopped; an adapter call may repeat, which the contract allows (every call is idempotent and
"already stopped" is success), so each stop takes effect once. A row is claimed with a lease
(compare-and-set on ``lease_until``) so several workers, or a restarted one, never run it at
the same time. Retryable errors back off exponentially; after ``max_attempts``, or on a
non-retryable error, the row is ``failed`` and the job ``stop_failed``.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .adapters._base import AdapterError, EnforcementAdapter, JobRef
from .background import DaemonLoop
from .metrics import ServiceMetrics
from .rewind_delivery import record_new_ref, rewind_of, stop_decided, submit
from .store import Conn, Store
from .store import delivery as delivery_store
from .store import job as job_store
from .store.delivery import TERMINAL
from .targets import AdapterRegistry, UnknownTarget

RowMapping = Mapping[Any, Any]

log = logging.getLogger("evalstop.service.worker")
GRACE_POLL_S = 1.0


class LeaseLost(RuntimeError):
    """Another worker claimed the row (this worker's lease expired): stop touching it."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_s: float = 0.5
    max_s: float = 60.0

    def delay(self, attempts: int) -> float:
        return float(min(self.max_s, self.base_s * 2 ** max(attempts - 1, 0)))


class Worker(DaemonLoop):
    thread_name = "evalstop-worker"

    def __init__(
        self, store: Store, adapters: AdapterRegistry, *, retry: RetryPolicy | None = None,
        lease_s: float = 30.0, poll_s: float = 0.1, metrics: ServiceMetrics | None = None,
    ) -> None:
        self.store, self.adapters, self.metrics = store, adapters, metrics
        self.retry = retry or RetryPolicy()
        self.lease_s, self.poll_s = lease_s, poll_s
        self.owner = uuid.uuid4().hex
        self.epoch = -1  # the fencing epoch of the row being advanced (one row at a time per worker)

    # -- thread (start/stop/alive from DaemonLoop) ----------------------------------------------
    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                busy = self.run_once()
            except Exception:  # a bug or a lost database: log it, keep the worker alive
                log.exception("outbox worker pass failed")
                busy = 0
            if not busy:
                stop.wait(self.poll_s)

    def release_leases(self) -> int:
        """Give up the leases this worker still holds (at shutdown, after :meth:`stop`), so another
        replica takes those rows now instead of when the leases expire; return how many. Safe even
        if the thread is still inside an adapter call: the next claim bumps the row's fencing
        epoch, so that call's later writes raise :class:`LeaseLost`."""
        return delivery_store.release_leases(self.store, self.owner)

    # -- one pass -----------------------------------------------------------------------------
    def run_once(self, limit: int = 20) -> int:
        """Claim due rows one at a time and advance each as far as it can go now; return how many."""
        done = 0
        while done < limit:
            claimed = self._claim()
            if claimed is None:
                break
            self._advance(*claimed)
            done += 1
        return done

    def _claim(self) -> tuple[int, int] | None:
        """Lease the next due row: ``(id, fencing epoch)``, or None. On PostgreSQL the row is
        picked with ``FOR UPDATE SKIP LOCKED``, so replicas claiming at once take different rows
        without waiting on each other; the epoch is bumped by every claim, and every later write
        of this worker names it, so a worker whose lease was taken over writes nothing more."""
        return delivery_store.claim(self.store, self.store.clock(), self.lease_s, self.owner)

    def _advance(self, row_id: int, epoch: int) -> None:
        try:
            self._advance_fenced(row_id, epoch)
        except LeaseLost:
            log.warning("outbox row %d: lease %d taken over by another worker; leaving it", row_id, epoch)

    def _advance_fenced(self, row_id: int, epoch: int) -> None:
        self.epoch = epoch
        row, job, uri, scope = delivery_store.load(self.store, row_id)
        ref = JobRef(job["id"], job["tenant"], job["external_ref"], dict(job["target_options"] or {}),
                     scope=scope or {})
        phase = row["phase"]
        try:
            adapter = self.adapters.get(job["target"])
            while phase not in TERMINAL:
                previous = phase
                phase, wait_until = self._step(phase, adapter, ref, row, job, uri)
                self._save(row_id, phase, wait_until, entered=phase != previous)
                if wait_until is not None:
                    return
        except (AdapterError, UnknownTarget) as exc:
            self._failed_attempt(row_id, row, job, exc)
        except Exception as exc:  # an adapter bug: say so loudly, count it, retry like a transient error
            log.exception("adapter %r raised an unexpected error for job %s", job["target"], job["id"])
            self._failed_attempt(row_id, row, job, AdapterError(f"unexpected {exc!r}", retryable=True))

    def _step(
        self, phase: str, adapter: EnforcementAdapter, ref: JobRef, row: RowMapping, job: RowMapping,
        uri: str | None,
    ) -> tuple[str, float | None]:
        """Run one phase; return the next phase and, if it must wait, until when."""
        now = self.store.clock()
        if phase in ("pin", "signal", "hard_stop"):  # before anything that changes the job
            adapter.check_owner(ref)
        if phase == "pin":
            adapter.pin_checkpoint(ref, uri)
            return "signal", None
        if phase == "signal":
            adapter.signal(ref)
            self._set(row["id"], signalled_at=now)
            if adapter.is_stopped(ref):
                return "reconcile", None
            return "grace", now + min(float(job["grace_period_s"]), GRACE_POLL_S)
        if phase == "grace":
            deadline = self._signalled_at(row["id"]) + float(job["grace_period_s"])
            if adapter.is_stopped(ref):
                return "reconcile", None
            return ("hard_stop", None) if now >= deadline else ("grace", min(deadline, now + GRACE_POLL_S))
        if phase == "hard_stop":
            adapter.hard_stop(ref)
            return "reconcile", None
        if phase == "reconcile":
            if adapter.is_stopped(ref) and rewind_of(self.store, row["decision_id"]) is not None:
                return "resubmit", None  # a rewind on an engine that resubmits (rewind_delivery.py)
            if adapter.is_stopped(ref):
                self._delivered(row["id"], job, now)
                return "done", None
            raise AdapterError(f"job {ref.external_ref!r} still holds its resources after hard_stop",
                               retryable=True)
        if phase == "resubmit":
            rewind = rewind_of(self.store, row["decision_id"])
            assert rewind is not None
            if stop_decided(self.store, job["id"]):  # a stop meanwhile (stop_now): no next attempt
                self._set(row["id"], None, delivered_at=now)
                return "done", None
            new_ref = submit(adapter, ref, job, uri, rewind)
            with self.store.transaction() as conn:
                self._set(row["id"], None, conn, delivered_at=now)
                record_new_ref(conn, job, row["decision_id"], ref.external_ref, new_ref, rewind[0], now)
            return "done", None
        raise RuntimeError(f"outbox row {row['id']} has unknown phase {phase!r}")

    # -- persistence --------------------------------------------------------------------------
    def _set(self, row_id: int, event: dict[str, Any] | None = None, conn: Conn | None = None,
             **values: Any) -> None:
        """Update the row if this worker's lease (its fencing epoch) still holds it, else raise
        :class:`LeaseLost`; with ``event``, add a line to its delivery history
        (``delivery_events``) in the same transaction."""
        if conn is None:
            with self.store.transaction() as conn:
                self._set(row_id, event, conn, **values)
            return
        if not delivery_store.update(conn, row_id, self.epoch, values, event, self.store.clock()):
            raise LeaseLost(row_id)

    def _signalled_at(self, row_id: int) -> float:
        value = delivery_store.signalled_at(self.store, row_id)
        return value if value is not None else float(self.store.clock())

    def _save(self, row_id: int, phase: str, wait_until: float | None, *, entered: bool = True) -> None:
        values: dict[str, Any] = {"phase": phase, "attempts": 0, "last_error": None,
                                  "lease_until": self.store.clock() + self.lease_s}  # renewed per phase
        if wait_until is not None or phase in TERMINAL:
            next_at = wait_until if wait_until is not None else self.store.clock()
            values.update(lease_until=None, lease_owner=None, next_attempt_at=next_at)
        self._set(row_id, {"phase": phase, "attempts": 0} if entered else None, **values)

    def _delivered(self, row_id: int, job: RowMapping, now: float) -> None:
        with self.store.transaction() as conn:
            self._set(row_id, None, conn, delivered_at=now)
            job_store.update(conn, job["id"], state="stopped", stopped_at=now)
        if self.metrics is not None:
            self.metrics.stops_enforced.labels(target=job["target"]).inc()
            if job["expected_duration_s"] is not None:
                left_s = max(0.0, job["created_at"] + job["expected_duration_s"] - now)
                self.metrics.gpu_hours_reclaimed.inc(job["gpus"] * left_s / 3600.0)
        log.info("stop delivered: job=%s target=%s", job["id"], job["target"])

    def _failed_attempt(self, row_id: int, row: RowMapping, job: RowMapping, exc: Exception) -> None:
        attempts, phase = delivery_store.attempts_and_phase(self.store, row_id)
        attempts += 1
        retryable = isinstance(exc, UnknownTarget) or bool(getattr(exc, "retryable", False))
        message = f"{type(exc).__name__}: {exc}"[:1000]
        if self.metrics is not None:
            self.metrics.adapter_errors.labels(target=job["target"], retryable=str(retryable).lower()).inc()
        values: dict[str, Any] = {"attempts": attempts, "last_error": message, "lease_until": None,
                                  "lease_owner": None}
        if retryable and attempts < self.retry.max_attempts:
            values["next_attempt_at"] = self.store.clock() + self.retry.delay(attempts)
            log.warning("stop of job %s: attempt %d failed (%s); retrying", job["id"], attempts, message)
            self._set(row_id, {"phase": phase, "attempts": attempts, "error": message}, **values)
            return
        log.error("stop of job %s failed for good after %d attempts: %s", job["id"], attempts, message)
        with self.store.transaction() as conn:
            event = {"phase": "failed", "attempts": attempts, "error": f"in {phase}: {message}"[:1000]}
            self._set(row_id, event, conn, phase="failed", **values)
            job_store.update(conn, job["id"], state="stop_failed")
