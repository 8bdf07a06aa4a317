"""The outbox worker: delivers each decided stop through the job's adapter.

Each outbox row walks ``pin -> signal -> grace -> hard_stop -> reconcile -> done``. Every phase
change is committed before the next adapter call, so after a crash the row resumes where it
stopped; an adapter call may repeat, which the contract allows (every call is idempotent and
"already stopped" is success), so each stop takes effect once. A row is claimed with a lease
(compare-and-set on ``lease_until``) so several workers, or a restarted one, never run it at
the same time. Retryable errors back off exponentially; after ``max_attempts``, or on a
non-retryable error, the row is ``failed`` and the job ``stop_failed``.

Delivery is concurrent and fair: ``threads`` delivery threads per replica, and at most
``per_tenant`` of them on one tenant's rows at once. A claim skips the rows of tenants already
at that bound, so one tenant's backlog, or its receiver hanging until the adapter's timeout,
holds at most ``per_tenant`` threads and never delays another tenant's stop
(docs/service.md, "Fair delivery").

Idle threads cost one wake-up per ``poll_s`` per replica, not one per thread: one idle thread
(the poller) waits ``poll_s`` and claims; the other idle threads wait until a claim finds a row
(each claim that finds one wakes one more idle thread, which claims the next), until stop, or,
as a backstop, until :data:`IDLE_WAIT_S`.

Housekeeping rides on the idle polls: at most once per ``sweep_s`` per replica, an idle delivery
thread deletes up to :data:`SWEEP_BATCH` console sessions that are revoked or expired. No thread
of its own, nothing per request.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import lifecycle
from .adapters._base import AdapterError, EnforcementAdapter, JobRef
from .background import DaemonLoop
from .metrics import ServiceMetrics
from .rewind_delivery import record_new_ref, rewind_of, stop_decided, submit
from .store import Conn, Store
from .store import delivery as delivery_store
from .store import session as session_store
from .store.delivery import TERMINAL, Claim
from .targets import AdapterRegistry, UnknownTarget

RowMapping = Mapping[Any, Any]

log = logging.getLogger("evalstop.service.worker")
GRACE_POLL_S = 1.0
#: Console sessions deleted by one sweep at most (a full batch: the next idle poll sweeps again).
SWEEP_BATCH = 500
#: Longest wait of an idle thread that is not the poller (a backstop: a claim that finds a row, or
#: stop, wakes it sooner).
IDLE_WAIT_S = 5.0


class LeaseLost(RuntimeError):
    """Another worker claimed the row (this worker's lease expired): stop touching it."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_s: float = 0.5
    max_s: float = 60.0

    def delay(self, attempts: int) -> float:
        return float(min(self.max_s, self.base_s * 2 ** max(attempts - 1, 0)))


@dataclass(frozen=True)
class Lease:
    """The outbox row a thread is advancing and the fencing epoch it claimed it with: every write
    names the epoch, so a thread whose lease was taken over writes nothing more."""

    row_id: int
    epoch: int


class Worker(DaemonLoop):
    thread_name = "evalstop-worker"

    def __init__(
        self, store: Store, adapters: AdapterRegistry, *, retry: RetryPolicy | None = None,
        lease_s: float = 30.0, poll_s: float = 0.1, metrics: ServiceMetrics | None = None,
        threads: int = 8, per_tenant: int = 2, sweep_s: float = 60.0,
    ) -> None:
        if threads < 1 or per_tenant < 1:
            raise ValueError(f"threads and per_tenant must be >= 1. Got threads={threads}, "
                             f"per_tenant={per_tenant} instead.")
        self.store, self.adapters, self.metrics = store, adapters, metrics
        self.retry = retry or RetryPolicy()
        self.lease_s, self.poll_s = lease_s, poll_s
        self.threads, self.per_tenant = threads, per_tenant
        self.sweep_s = sweep_s
        self._sweep_at = 0.0  # monotonic: when an idle thread next sweeps dead console sessions
        self.owner = uuid.uuid4().hex
        self._claiming = threading.Lock()  # one claim at a time; guards the two fields below
        self._busy: Counter[str] = Counter()  # rows each tenant has in this replica's threads now
        self._idle_until = 0.0  # monotonic: the last claim found nothing due; poll again after it
        self._wake = threading.Condition(self._claiming)  # idle threads wait on it
        self._polling = False  # an idle thread is waiting poll_s to claim (guarded by _claiming)
        self._pool: list[threading.Thread] = []

    # -- threads ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start ``threads`` delivery threads (daemons: a hung adapter call never blocks exit)."""
        self._stop_event = stop = threading.Event()
        self._pool = [threading.Thread(target=self._run, args=(stop,), name=f"{self.thread_name}-{i}",
                                       daemon=True) for i in range(self.threads)]
        for thread in self._pool:
            thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop claiming; wait up to ``timeout_s`` in all for the rows in flight. A thread still in
        an adapter call after that is left to finish; :meth:`release_leases` fences its writes."""
        if self._stop_event is not None:
            self._stop_event.set()
        with self._wake:
            self._wake.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self._pool:
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self._pool)

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                claimed = self._claim_fair()
            except Exception:  # a bug or a lost database: log it, keep the worker alive
                log.exception("outbox claim failed")
                claimed = None
            if claimed is None:
                self._housekeep()
                self._idle(stop)
                continue
            try:
                self._advance(claimed.row_id, claimed.epoch)
            except Exception:
                log.exception("outbox row %d: delivery pass failed", claimed.row_id)
            finally:
                with self._claiming:
                    self._busy[claimed.tenant] -= 1
                    if not self._busy[claimed.tenant]:
                        del self._busy[claimed.tenant]  # keep only tenants with rows in flight
                    self._idle_until = 0.0  # a slot is free: the tenant's next row may be due now

    def _idle(self, stop: threading.Event) -> None:
        """Wait after a claim that found nothing: if no other idle thread is the poller, until the
        next poll is due (``poll_s`` after the last claim that found nothing; then claim again),
        else until a claim finds a row or stop wakes this thread."""
        with self._wake:
            if stop.is_set():
                return
            if self._polling:
                self._wake.wait(IDLE_WAIT_S)
                return
            self._polling = True
            try:
                due_in = self._idle_until - time.monotonic()
                self._wake.wait(due_in if due_in > 0 else self.poll_s)
            finally:
                self._polling = False

    def _claim_fair(self) -> Claim | None:
        """Lease the next due row of a tenant with fewer than ``per_tenant`` rows in this replica's
        threads, or None. After a claim that found nothing, the other threads skip the query
        until ``poll_s`` has passed (one poll per interval, however many threads are idle)."""
        with self._claiming:
            if time.monotonic() < self._idle_until:
                return None
            full = [tenant for tenant, n in self._busy.items() if n >= self.per_tenant]
            claimed = delivery_store.claim(self.store, self.store.clock(), self.lease_s, self.owner, full)
            if claimed is None:
                self._idle_until = time.monotonic() + self.poll_s
                return None
            self._busy[claimed.tenant] += 1
            self._wake.notify()  # a row was due: one more idle thread looks for the next
            return claimed

    def _housekeep(self) -> None:
        """Sweep dead console sessions if ``sweep_s`` has passed since this replica's last sweep
        (one idle thread does it; the others go on claiming)."""
        with self._claiming:
            if time.monotonic() < self._sweep_at:
                return
            self._sweep_at = time.monotonic() + self.sweep_s
        try:
            swept = self.sweep_sessions()
        except Exception:  # a lost database: the next sweep tries again
            log.exception("console session sweep failed")
            return
        if swept >= SWEEP_BATCH:
            with self._claiming:
                self._sweep_at = 0.0  # more are due: sweep again at the next idle poll

    def sweep_sessions(self) -> int:
        """Delete up to :data:`SWEEP_BATCH` revoked or expired console sessions; return how many."""
        return session_store.sweep(self.store, self.store.clock(), SWEEP_BATCH)

    def release_leases(self) -> int:
        """Give up the leases this worker still holds (at shutdown, after :meth:`stop`), so another
        replica takes those rows now instead of when the leases expire; return how many. Safe even
        if the thread is still inside an adapter call: the next claim bumps the row's fencing
        epoch, so that call's later writes raise :class:`LeaseLost`."""
        return delivery_store.release_leases(self.store, self.owner)

    # -- one pass -----------------------------------------------------------------------------
    def run_once(self, limit: int = 20) -> int:
        """Claim due rows one at a time and advance each as far as it can go now, in the calling
        thread (tests and tools; the threads of :meth:`start` deliver concurrently); return how many."""
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
        claimed = delivery_store.claim(self.store, self.store.clock(), self.lease_s, self.owner)
        return None if claimed is None else (claimed.row_id, claimed.epoch)

    def _advance(self, row_id: int, epoch: int) -> None:
        try:
            self._advance_fenced(Lease(row_id, epoch))
        except LeaseLost:
            log.warning("outbox row %d: lease %d taken over by another worker; leaving it", row_id, epoch)

    def _advance_fenced(self, lease: Lease) -> None:
        row, job, uri, scope = delivery_store.load(self.store, lease.row_id)
        ref = JobRef(job["id"], job["tenant"], job["external_ref"], dict(job["target_options"] or {}),
                     scope=scope or {})
        phase = row["phase"]
        if phase == "pin" and row["attempts"] == 0:  # rows start in pin: say when pinning began
            self._set(lease, {"phase": "pin", "attempts": 0}, lease_until=self.store.clock() + self.lease_s)
        try:
            adapter = self.adapters.get(job["target"])
            while phase not in TERMINAL:
                previous = phase
                phase, wait_until = self._step(lease, phase, adapter, ref, row, job, uri)
                self._save(lease, phase, wait_until, entered=phase != previous)
                if wait_until is not None:
                    return
        except (AdapterError, UnknownTarget) as exc:
            self._failed_attempt(lease, job, exc)
        except Exception as exc:  # an adapter bug: say so loudly, count it, retry like a transient error
            log.exception("adapter %r raised an unexpected error for job %s", job["target"], job["id"])
            self._failed_attempt(lease, job, AdapterError(
                f"unexpected {type(exc).__name__} in the {job['target']} adapter (see the service log)",
                retryable=True))

    def _step(
        self, lease: Lease, phase: str, adapter: EnforcementAdapter, ref: JobRef, row: RowMapping,
        job: RowMapping, uri: str | None,
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
            self._set(lease, signalled_at=now)
            if adapter.is_stopped(ref):
                return "reconcile", None
            return "grace", now + min(float(job["grace_period_s"]), GRACE_POLL_S)
        if phase == "grace":
            deadline = self._signalled_at(lease.row_id) + float(job["grace_period_s"])
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
                self._delivered(lease, job, now)
                return "done", None
            raise AdapterError(f"job {ref.external_ref!r} still holds its resources after hard_stop",
                               retryable=True)
        if phase == "resubmit":
            rewind = rewind_of(self.store, row["decision_id"])
            assert rewind is not None
            if stop_decided(self.store, job["id"]):  # a stop meanwhile (stop_now): no next attempt
                self._set(lease, None, delivered_at=now)
                return "done", None
            new_ref = submit(adapter, ref, job, uri, rewind)
            with self.store.transaction() as conn:
                self._set(lease, None, conn, delivered_at=now)
                record_new_ref(conn, job, row["decision_id"], ref.external_ref, new_ref, rewind[0], now)
            return "done", None
        raise RuntimeError(f"outbox row {lease.row_id} has unknown phase {phase!r}")

    # -- persistence --------------------------------------------------------------------------
    def _set(self, lease: Lease, event: dict[str, Any] | None = None, conn: Conn | None = None,
             **values: Any) -> None:
        """Update the row if ``lease`` (its fencing epoch) still holds it, else raise
        :class:`LeaseLost`; with ``event``, add a line to its delivery history
        (``delivery_events``) in the same transaction."""
        if conn is None:
            with self.store.transaction() as conn:
                self._set(lease, event, conn, **values)
            return
        if not delivery_store.update(conn, lease.row_id, lease.epoch, values, event, self.store.clock()):
            raise LeaseLost(lease.row_id)

    def _signalled_at(self, row_id: int) -> float:
        value = delivery_store.signalled_at(self.store, row_id)
        return value if value is not None else float(self.store.clock())

    def _save(self, lease: Lease, phase: str, wait_until: float | None, *, entered: bool = True) -> None:
        values: dict[str, Any] = {"phase": phase, "attempts": 0, "last_error": None,
                                  "lease_until": self.store.clock() + self.lease_s}  # renewed per phase
        if wait_until is not None or phase in TERMINAL:
            next_at = wait_until if wait_until is not None else self.store.clock()
            values.update(lease_until=None, lease_owner=None, next_attempt_at=next_at)
        self._set(lease, {"phase": phase, "attempts": 0} if entered else None, **values)

    def _delivered(self, lease: Lease, job: RowMapping, now: float) -> None:
        with self.store.transaction() as conn:
            self._set(lease, None, conn, delivered_at=now)
            lifecycle.move(conn, job["id"], lifecycle.STOPPED, now)
        if self.metrics is not None:
            self.metrics.stops_enforced.labels(target=job["target"]).inc()
            if job["expected_duration_s"] is not None:
                left_s = max(0.0, job["created_at"] + job["expected_duration_s"] - now)
                self.metrics.gpu_hours_reclaimed.inc(job["gpus"] * left_s / 3600.0)
        log.info("stop delivered: job=%s target=%s", job["id"], job["target"])

    def _failed_attempt(self, lease: Lease, job: RowMapping, exc: Exception) -> None:
        attempts, phase = delivery_store.attempts_and_phase(self.store, lease.row_id)
        attempts += 1
        retryable = isinstance(exc, UnknownTarget) or bool(getattr(exc, "retryable", False))
        message = f"{type(exc).__name__}: {exc}"[:1000]  # never exc.detail: see AdapterError
        said = getattr(exc, "detail", "")
        if said:
            log.warning("stop of job %s: %s; the backend said: %s", job["id"], message, said)
        if self.metrics is not None:
            self.metrics.adapter_errors.labels(target=job["target"], retryable=str(retryable).lower()).inc()
        values: dict[str, Any] = {"attempts": attempts, "last_error": message, "lease_until": None,
                                  "lease_owner": None}
        if retryable and attempts < self.retry.max_attempts:
            values["next_attempt_at"] = self.store.clock() + self.retry.delay(attempts)
            log.warning("stop of job %s: attempt %d failed (%s); retrying", job["id"], attempts, message)
            self._set(lease, {"phase": phase, "attempts": attempts, "error": message}, **values)
            return
        log.error("stop of job %s failed for good after %d attempts: %s", job["id"], attempts, message)
        with self.store.transaction() as conn:
            event = {"phase": "failed", "attempts": attempts, "error": f"in {phase}: {message}"[:1000]}
            self._set(lease, event, conn, phase="failed", **values)
            lifecycle.move(conn, job["id"], lifecycle.STOP_FAILED, self.store.clock())
