"""The log readers on files written by the real writer libraries: incremental, torn writes wait."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evalstop.logs import JsonlReader, MlflowFileReader, TensorBoardReader


def test_tensorboard_summarywriter_incremental_and_torn_record(tmp_path: Path) -> None:
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    writer = torch_tb.SummaryWriter(str(tmp_path / "runs" / "a"))
    for step in (1, 2, 3):
        writer.add_scalar("val/score", 0.1 * step, step)
        writer.add_scalar("train/loss", 1.0 / step, step)
    writer.flush()
    reader = TensorBoardReader(tmp_path, "val/score", recursive=True)
    assert [(r.step, round(r.value, 6)) for r in reader.read()] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert reader.names() == ["train/loss", "val/score"]
    assert reader.read() == []
    (path,) = reader.files()
    size = path.stat().st_size
    writer.add_scalar("val/score", 0.4, 4)
    writer.flush()
    whole = path.read_bytes()
    path.write_bytes(whole[: size + 10])  # the writer is mid-record
    assert reader.read() == []
    path.write_bytes(whole)
    assert [r.step for r in reader.read()] == [4]
    writer.close()
    assert TensorBoardReader(tmp_path, "val/score").read() == []  # not recursive: nothing at the top


def test_jsonl_verl_file_logger_layout(tmp_path: Path) -> None:
    path = tmp_path / "proj" / "exp.jsonl"
    reader = JsonlReader(path, "val-core/x/acc", values_key="data")
    assert not reader.exists() and reader.read() == []
    path.parent.mkdir()
    lines = [{"step": 1, "data": {"actor/loss": 0.3}}, {"step": 2, "data": {"val-core/x/acc": 0.5}}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 3, "da')
    assert [(r.step, r.value) for r in reader.read()] == [(2, 0.5)]
    with path.open("a") as fh:
        fh.write('ta": {"val-core/x/acc": 0.25}}\nnot json\n')
    assert [(r.step, r.value) for r in reader.read()] == [(3, 0.25)]
    assert reader.names() == ["actor/loss", "val-core/x/acc"]


def test_mlflow_file_store_written_by_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store on request
    store = tmp_path / "mlruns"
    mlflow.set_tracking_uri(store.as_uri())
    with mlflow.start_run() as run:
        mlflow.log_metric("val/acc", 0.5, step=10)
        mlflow.log_metric("train/loss", 0.9, step=10)
        reader = MlflowFileReader(store, "val/acc")
        assert [(r.step, r.value) for r in reader.read()] == [(10, 0.5)]
        assert Path(reader.location).name == run.info.run_id
        mlflow.log_metric("val/acc", 0.45, step=20)
        assert [(r.step, r.value) for r in reader.read()] == [(20, 0.45)]
    assert reader.names() == ["train/loss", "val/acc"]


def test_sidecar_reads_trainer_state_by_the_tensorboard_tag(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from evalstop.cli import main

    history = [{"step": 10, "eval_reward": 0.5}, {"step": 20, "loss": 1.0}, {"step": 20, "eval_reward": 0.4}]
    (tmp_path / "checkpoint-20").mkdir()
    (tmp_path / "checkpoint-20" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    code = main(["watch", "--framework", "trl", "--log", "trainer_state", "--logdir", str(tmp_path),
                 "--shadow", "--poll", "0.05", "--", sys.executable, "-c", "pass"])
    assert code == 0
    lines = capsys.readouterr().err.splitlines()
    steps = [x.split(" ")[3] for x in lines if x.startswith("evalstop watch: step ")]
    assert steps == ["10", "20"]


def test_watch_reads_an_mlflow_run_from_its_database_and_stops_the_run(tmp_path: Path) -> None:
    """MLflow 3 keeps runs in a database by default: the sidecar reads one through the client
    (``--mlflow-run``), decides on its declining metric and stops the command (exit 3)."""
    import subprocess

    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run() as run:
        for step, value in enumerate([0.5, 0.6, 0.7, 0.65, 0.6, 0.55, 0.5], start=1):
            mlflow.log_metric("val/acc", value, step=step * 10)
    argv = [sys.executable, "-m", "evalstop.cli", "watch", "--log", "mlflow", "--metric", "val/acc",
            "--mlflow-run", run.info.run_id, "--mlflow-tracking-uri", uri, "--mode", "max",
            "--detector", "evalstop:k=2", "--poll", "0.2", "--grace", "2",
            "--", sys.executable, "-c", "import time; time.sleep(120)"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert ": STOP (" in proc.stderr and "best step 30 " in proc.stderr
    bad = subprocess.run([*argv[:4], "--log", "jsonl", "--metric", "m", "--mlflow-run", "x", "--",
                          "true"], capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--mlflow-run" in bad.stderr
