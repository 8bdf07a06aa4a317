"""The domain layer and the outbox worker, the same tests on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import ValidationError

from evalstop.service import domain
from evalstop.service.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from evalstop.service.ingest import ScoreIn
from evalstop.service.settings import ServiceSettings
from evalstop.service.store import Limits, Store, decisions, outbox, scores
from evalstop.service.targets import AdapterRegistry
from evalstop.service.worker import RetryPolicy, Worker
from evalstop.testing.recording import RecordingAdapter

from ._support import RECORDING_PLUGIN

StoreFactory = Callable[..., Store]
DECLINING = [ScoreIn(step=1, value=0.5, checkpoint_uri="ckpt-1"),
             ScoreIn(step=2, value=0.6, checkpoint_uri="ckpt-2"),
             ScoreIn(step=3, value=0.55), ScoreIn(step=4, value=0.5)]


def new_job(store: Store, tenant: str = "acme", **spec: object) -> str:
    if tenant not in {t["name"] for t in domain.list_tenants(store)}:
        domain.create_tenant(store, tenant)
    values = {"external_ref": f"ref-{tenant}", "target": "recording", "detector": "evalstop:k=2", **spec}
    return str(domain.register_job(store, tenant, domain.JobSpec(**values))["id"])  # type: ignore[arg-type]


def count(store: Store, table: sa.Table, job_id: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)
                                .where(table.c.job_id == job_id)).scalar_one())


def counts(store: Store, job_id: str) -> tuple[int, int, int]:
    """(decisions, outbox rows, scores) of one job."""
    return count(store, decisions, job_id), count(store, outbox, job_id), count(store, scores, job_id)


def test_ingest_decides_once_and_enqueues_in_the_same_transaction(store_factory: StoreFactory) -> None:
    store = store_factory()
    job_id = new_job(store)
    results = [domain.ingest_scores(store, job_id, "acme", [s]) for s in DECLINING]
    assert [r.decided_now for r in results] == [False, False, False, True]
    assert (results[-1].best_step, results[-1].best_checkpoint_uri) == (2, "ckpt-2")
    again = domain.ingest_scores(store, job_id, "acme", [ScoreIn(step=5, value=0.1)])
    assert (again.decided_now, again.decision, again.state) == (False, "stop", "stopping")
    assert counts(store, job_id) == (1, 1, 5)


def test_idempotent_step_conflict_and_out_of_order(store_factory: StoreFactory) -> None:
    store = store_factory()
    job_id = new_job(store)
    domain.ingest_scores(store, job_id, "acme", DECLINING[:2])
    same = domain.ingest_scores(store, job_id, "acme",
                                [ScoreIn(step=2, value=0.6), ScoreIn(step=5, value=0.7)])
    assert (same.accepted, same.duplicates) == (1, 1)
    already = r"scores\[0\]: step 2 of metric 'score' already has value 0.6; got 0.9"
    with pytest.raises(Conflict, match=already):
        domain.ingest_scores(store, job_id, "acme", [ScoreIn(step=2, value=0.9)])
    with pytest.raises(Conflict, match="step 3 of metric 'score' is out of order: it comes after step 5"):
        domain.ingest_scores(store, job_id, "acme", [ScoreIn(step=3, value=0.7)])
    with pytest.raises(Conflict, match=r"scores\[1\]: step 4 .* out of order: it comes after step 6"):
        domain.ingest_scores(store, job_id, "acme",
                             [ScoreIn(step=6, value=0.7), ScoreIn(step=4, value=0.61)])
    assert count(store, scores, job_id) == 3  # the refused batch wrote nothing (step 4 not kept)


@pytest.mark.parametrize(("fields", "field", "kind"), [
    ({"step": 1, "value": float("nan")}, "value", "finite_number"),
    ({"step": 1, "value": 0.5, "loss": float("inf")}, "loss", "finite_number"),
    ({"step": -3, "value": 0.5}, "step", "greater_than_equal"),
    ({"step": 1.0, "value": 0.5}, "step", "int_type"),
    ({"step": 1, "value": True}, "value", "float_type"),
    ({"step": 1, "value": 0.5, "extra": 1}, "extra", "extra_forbidden"),
])
def test_a_score_is_validated_once_when_built(fields: dict[str, Any], field: str, kind: str) -> None:
    """Route, puller and direct callers build the same ScoreIn: a bad field never reaches ingest."""
    with pytest.raises(ValidationError) as caught:
        ScoreIn(**fields)
    assert [(e["loc"], e["type"]) for e in caught.value.errors()] == [((field,), kind)]


def test_ingest_checks_what_a_score_cannot(store_factory: StoreFactory) -> None:
    """The configured max_step, the batch size and the tenant, whoever calls (the pullers too)."""
    store = store_factory(limits=Limits(max_batch=3, max_step=1000))
    job_id = new_job(store)
    with pytest.raises(InvalidInput, match=r"scores\[0\].step must be an int in \[0, 1000\]. Got 1000000"):
        domain.ingest_scores(store, job_id, "acme", [ScoreIn(step=10**6, value=0.5)])
    with pytest.raises(PayloadTooLarge, match=r"at most 3 scores\. Got 4"):
        domain.ingest_scores(store, job_id, "acme", [ScoreIn(step=i, value=0.5) for i in range(4)])
    with pytest.raises(NotFound, match="not found"):
        domain.ingest_scores(store, job_id, "other", [ScoreIn(step=1, value=0.5)])
    assert count(store, scores, job_id) == 0


def test_concurrent_writers_never_decide_twice(store_factory: StoreFactory) -> None:
    """Eight threads race the same declining history into one job: one decision, one outbox row,
    every step stored once."""
    store = store_factory()
    job_id = new_job(store)
    history = [ScoreIn(step=i, value=1.0 - 0.01 * i) for i in range(1, 41)]
    errors: list[BaseException] = []

    def writer(offset: int) -> None:
        try:
            for i in range(0, len(history), 4):
                domain.ingest_scores(store, job_id, "acme", history[i:i + 4])
        except Conflict:  # another thread got further first: an out-of-order resend is refused
            pass
        except BaseException as exc:  # pragma: no cover - a failure to report
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert counts(store, job_id) == (1, 1, 40)


def make_worker(store: Store, **retry: float) -> tuple[Worker, RecordingAdapter]:
    registry = AdapterRegistry(RECORDING_PLUGIN)
    adapter = registry.get("recording")
    assert isinstance(adapter, RecordingAdapter)
    policy = RetryPolicy(max_attempts=int(retry.get("max_attempts", 5)), base_s=0.5, max_s=4.0)
    return Worker(store, registry, retry=policy), adapter


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_worker_waits_the_grace_period_then_hard_stops(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.clock = clock = Clock()
    job_id = new_job(store, grace_period_s=30, target_options={"obeys_signal": False})
    domain.ingest_scores(store, job_id, "acme", DECLINING)
    worker, adapter = make_worker(store)
    worker.run_once()
    assert [c["call"] for c in adapter.calls] == ["pin_checkpoint", "signal"]
    assert adapter.calls[0]["checkpoint_uri"] == "ckpt-2"
    for _ in range(3):  # still in grace: polls is_stopped, no hard stop
        clock.now += 1.0
        worker.run_once()
    assert [c["call"] for c in adapter.calls] == ["pin_checkpoint", "signal"]
    clock.now += 30
    worker.run_once()
    assert [c["call"] for c in adapter.calls] == ["pin_checkpoint", "signal", "hard_stop"]
    assert adapter.effects("hard_stop", "ref-acme") == 1
    assert domain.get_job(store, job_id, None)["state"] == "stopped"
    assert worker.run_once() == 0


def test_worker_retries_with_exponential_backoff_then_delivers(store_factory: StoreFactory) -> None:
    store = store_factory()
    store.clock = clock = Clock()
    job_id = new_job(store, grace_period_s=0)
    domain.ingest_scores(store, job_id, "acme", DECLINING)
    worker, adapter = make_worker(store)
    adapter.fail_next("signal", 3)
    delays = []
    for _ in range(3):
        worker.run_once()
        with store.engine.connect() as conn:
            row = conn.execute(sa.select(outbox)).mappings().one()
        delays.append(row["next_attempt_at"] - clock.now)
        assert worker.run_once() == 0  # not due yet
        clock.now = row["next_attempt_at"]
    assert delays == [0.5, 1.0, 2.0]
    assert "injected failure of signal" in row["last_error"]
    worker.run_once()
    job = domain.get_job(store, job_id, None)
    assert job["state"] == "stopped" and job["deliveries"][0]["attempts"] == 0
    assert adapter.effects("pin_checkpoint", "ref-acme") == 1 and adapter.effects("signal", "ref-acme") == 1


def test_non_retryable_error_fails_the_stop_visibly(store_factory: StoreFactory) -> None:
    store = store_factory()
    job_id = new_job(store, grace_period_s=0)
    domain.ingest_scores(store, job_id, "acme", DECLINING)
    worker, adapter = make_worker(store)
    adapter.fail_next("pin_checkpoint", 1, retryable=False)
    worker.run_once()
    job = domain.get_job(store, job_id, None)
    assert job["state"] == "stop_failed"
    assert job["deliveries"][0]["phase"] == "failed"
    assert "injected failure of pin_checkpoint" in job["deliveries"][0]["last_error"]
    assert worker.run_once() == 0 and adapter.calls == []


def test_a_leased_row_is_not_run_by_a_second_worker(store_factory: StoreFactory) -> None:
    store = store_factory()
    job_id = new_job(store, grace_period_s=0)
    domain.ingest_scores(store, job_id, "acme", DECLINING)
    first, _ = make_worker(store)
    second, adapter = make_worker(store)
    assert first._claim() is not None and second._claim() is None
    assert second.run_once() == 0 and adapter.calls == []


def test_a_worker_whose_lease_was_taken_over_writes_nothing(store_factory: StoreFactory) -> None:
    """Fencing: the first worker's lease expires mid-stop, a second claims the row (epoch + 1);
    every later write of the first is refused, so it cannot move the row back or fail it."""
    store = store_factory()
    store.clock = clock = Clock()
    job_id = new_job(store, grace_period_s=0)
    domain.ingest_scores(store, job_id, "acme", DECLINING)
    first, _ = make_worker(store)
    second, _ = make_worker(store)
    row_id, epoch = first._claim()  # type: ignore[misc]
    clock.now += first.lease_s + 1
    assert second._claim() == (row_id, epoch + 1)
    first._advance(row_id, epoch)  # runs its adapter calls, but its writes are fenced off
    delivery = domain.get_job(store, job_id, None)["deliveries"][0]
    assert (delivery["phase"], delivery["attempts"]) == ("pin", 0)
    second._advance(row_id, epoch + 1)
    assert domain.get_job(store, job_id, None)["state"] == "stopped"


def test_an_adapter_bug_is_counted_and_retried_not_fatal(
    store_factory: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_factory()
    store.clock = clock = Clock()
    job_id = new_job(store, grace_period_s=0)
    domain.ingest_scores(store, job_id, "acme", DECLINING)
    worker, adapter = make_worker(store)
    adapter.fail_next("signal", 1, retryable=None)
    worker.run_once()
    delivery = domain.get_job(store, job_id, None)["deliveries"][0]
    assert (delivery["phase"], delivery["attempts"]) == ("signal", 1)
    # the tenant sees evalstop's own sentence; what the adapter raised is in the operator's log
    assert "unexpected RuntimeError in the recording adapter" in delivery["last_error"]
    assert "injected bug in signal" not in delivery["last_error"]
    assert "injected bug in signal" in caplog.text
    clock.now += 1.0
    worker.run_once()
    assert domain.get_job(store, job_id, None)["state"] == "stopped"


def test_the_recording_adapter_passes_the_adapter_contract() -> None:
    from evalstop.service.adapters._base import JobRef
    from evalstop.testing.adapter_contract import check_stop_sequence, check_unknown_job

    adapter = RecordingAdapter()
    check_stop_sequence(adapter, JobRef("j1", "acme", "ref-1", {"obeys_signal": False}), "ckpt-1")
    check_unknown_job(adapter, JobRef("j2", "acme", "ref-2"))
    assert adapter.effects("hard_stop", "ref-1") == 1 and adapter.effects("pin_checkpoint", "ref-1") == 1


def test_register_job_bounds_the_rules_size_for_library_callers(store_factory: StoreFactory) -> None:
    """The bounded-rule check is in the domain layer, not only in the HTTP route: a library
    caller gets the safe default (the setting's), and may pass another limit."""
    assert ServiceSettings().rule_max_window == domain.RULE_MAX_WINDOW  # one default, two homes
    store = store_factory()
    domain.create_tenant(store, "acme")
    checked: list[str] = []
    spec = domain.JobSpec(external_ref="r1", target="recording", detector="mann-kendall:max_window=100000")
    with pytest.raises(InvalidInput, match=r"max_window=100000 is over the service's limit of 256"):
        domain.register_job(store, "acme", spec, check_owner=lambda t, ref: checked.append(t))
    with pytest.raises(InvalidInput, match=r"limit of 50 "):
        domain.register_job(store, "acme", dataclasses.replace(spec, detector="slaq:window=51"),
                            rule_max_window=50)
    assert checked == [] and domain.list_jobs(store, "acme") == []  # nothing asked, nothing stored
    assert domain.register_job(store, "acme", spec, rule_max_window=100_000)["detector"].startswith(
        "mann-kendall")
