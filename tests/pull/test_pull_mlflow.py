"""The MLflow poller against a real MLflow tracking store on SQLite."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mlflow", reason="needs the pull extra: pip install -e '.[pull]'")

from pull_sinks import RecordingSink

from evalstop.service.pull import Cursor, make_poller


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, str]:
    from mlflow.tracking import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("evalstop-test", artifact_location=(root / "artifacts").as_uri())
    return uri, client, exp


def new_run(store: tuple[str, Any, str]) -> str:
    _, client, exp = store
    run_id: str = client.create_run(exp).info.run_id
    return run_id


def test_polls_new_evals_once_with_checkpoint_and_time(store: tuple[str, Any, str], tmp_path: Path) -> None:
    uri, client, _ = store
    run_a, run_b = new_run(store), new_run(store)
    for step, value in [(100, 0.51), (200, 0.58), (300, 0.55)]:
        client.log_metric(run_a, "eval_win_rate", value, step=step, timestamp=1_700_000_000_000 + step)
    client.log_metric(run_a, "train_loss", 1.2, step=100)
    client.log_metric(run_b, "eval_win_rate", 0.4, step=50)
    sink = RecordingSink()
    poller = make_poller("mlflow", sink, tracking_uri=uri, runs={"job-a": run_a, "job-b": run_b},
                         metric="eval_win_rate", checkpoint_template="runs:/{run_id}/ckpt/step-{step}",
                         cursor=Cursor(tmp_path / "cursor.json"))
    assert poller.poll().delivered == 4
    assert sink.steps("job-a") == [100, 200, 300] and sink.steps("job-b") == [50]
    first = sink.calls[0][1][0]
    assert first.value == pytest.approx(0.51) and first.metric == "eval_win_rate"
    assert first.checkpoint_uri == f"runs:/{run_a}/ckpt/step-100"
    assert first.ts == pytest.approx(1_700_000_000.1)
    assert poller.poll().delivered == 0  # idempotent re-poll
    client.log_metric(run_a, "eval_win_rate", 0.49, step=400)
    assert poller.poll().delivered == 1 and sink.steps("job-a")[-1] == 400
    restarted = make_poller("mlflow", sink, tracking_uri=uri, runs={"job-a": run_a, "job-b": run_b},
                            metric="eval_win_rate", cursor=Cursor(tmp_path / "cursor.json"))
    assert restarted.poll().delivered == 0  # the persisted cursor survives a restart


def test_nan_is_counted_not_delivered_and_sink_failure_retries(store: tuple[str, Any, str]) -> None:
    uri, client, _ = store
    run = new_run(store)
    client.log_metric(run, "acc", 0.7, step=1)
    client.log_metric(run, "acc", math.nan, step=2)
    sink = RecordingSink(fail_for={"j"})
    poller = make_poller("mlflow", sink, tracking_uri=uri, runs={"j": run}, metric="acc")
    stats = poller.poll()
    assert stats.delivered == 0 and "ingest unavailable" in stats.errors["j"]
    sink.fail_for.clear()
    stats = poller.poll()
    assert (stats.delivered, stats.invalid, sink.steps("j")) == (1, 1, [1])
    assert poller.poll().delivered == 0


def test_unknown_run_is_skipped(store: tuple[str, Any, str]) -> None:
    uri, client, _ = store
    good = new_run(store)
    client.log_metric(good, "acc", 0.5, step=3)
    sink = RecordingSink()
    poller = make_poller("mlflow", sink, tracking_uri=uri, runs={"gone": "0" * 32, "ok": good}, metric="acc")
    assert poller.poll().delivered == 1 and sink.steps("ok") == [3]
