"""W&B run files written by the real ``wandb`` package offline (no network, no login): the reader
reads history rows incrementally, a torn write waits, a record that crosses a 32 KiB block is
joined, and ``evalstop watch --log wandb`` stops a run whose eval declines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb", reason="needs the watch-wandb extra: pip install -e '.[watch-wandb]'")

from evalstop.logs import WandbReader
from evalstop.logs._wandb import FILE_HEADER

ROOT = Path(__file__).resolve().parents[2]
#: a run: eval/reward rises for 3 evals then falls; a 40 kB text crosses a block at step 2
RUN = """import sys, time, wandb
run = wandb.init(project="p", dir=sys.argv[1], mode="offline")
values = [0.3, 0.5, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25]
for i, v in enumerate(values[: int(sys.argv[2])], 1):
    run.log({"train/loss": 1.0 / i, "eval/reward": v, "gold": {"acc": v / 2},
             "note": "x" * (40000 if i == 2 else 1)}, step=10 * i)
    time.sleep(float(sys.argv[3]))
run.finish()
"""


def wandb_env(tmp_path: Path, encoding: str = "json") -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HOME": str(tmp_path),
            "WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL": "0.2", "WANDB_X_HISTORY_VALUE_ENCODING": encoding,
            "PYTHONPATH": str(ROOT / "src")}


def write_run(tmp_path: Path, n: int, encoding: str = "json") -> Path:
    script = tmp_path / "run.py"
    script.write_text(RUN)
    subprocess.run([sys.executable, str(script), str(tmp_path), str(n), "0"], check=True,
                   env=wandb_env(tmp_path, encoding), timeout=300)
    (path,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    return path


@pytest.mark.parametrize("encoding", ["json", "json,typed"])
def test_offline_run_history_incremental_torn_and_across_blocks(tmp_path: Path, encoding: str) -> None:
    whole = write_run(tmp_path, 4, encoding).read_bytes()
    assert whole.startswith(FILE_HEADER) and len(whole) > 32768  # the long note crossed a block
    live = tmp_path / "live" / "run-x.wandb"
    live.parent.mkdir()
    reader = WandbReader(tmp_path / "live", "eval/reward")
    assert reader.read() == []
    seen: list[tuple[int, float]] = []
    for cut in (5, 7, 3000, 20000, 33000, 40000, len(whole) - 3, len(whole)):  # the writer, byte by byte
        live.write_bytes(whole[:cut])
        seen += [(r.step, r.value) for r in reader.read()]
    assert seen == [(10, 0.3), (20, 0.5), (30, 0.6), (40, 0.55)]
    assert reader.read() == []
    assert reader.names() == ["eval/reward", "gold.acc", "train/loss"]
    nested = WandbReader(tmp_path / "wandb", "gold.acc").read()  # the wandb/ directory: its runs
    assert [(r.step, r.value) for r in nested] == [(10, 0.15), (20, 0.25), (30, 0.3), (40, 0.275)]
    assert all(r.ts is not None and r.ts > 1.7e9 for r in nested)


def test_a_file_that_is_not_a_wandb_log_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / "run-x.wandb").write_bytes(b"not a W&B file at all")
    reader = WandbReader(tmp_path, "eval/reward")
    assert reader.read() == [] and reader.read() == []


def test_a_corrupt_chunk_ends_the_reading_of_that_file(tmp_path: Path) -> None:
    whole = bytearray(write_run(tmp_path, 3).read_bytes())
    whole[-5] ^= 0xFF  # inside the last record (the run's exit)
    bad = tmp_path / "bad" / "run-x.wandb"
    bad.parent.mkdir()
    bad.write_bytes(bytes(whole))
    reader = WandbReader(bad, "eval/reward")
    assert [r.step for r in reader.read()] == [10, 20, 30]  # the records before it; one warning
    assert reader.read() == []  # and no more from that file


@pytest.mark.slow
def test_watch_stops_an_offline_wandb_run(tmp_path: Path) -> None:
    script = tmp_path / "run.py"
    script.write_text(RUN)
    argv = [sys.executable, "-m", "evalstop.cli", "watch", "--log", "wandb",
            "--logdir", str(tmp_path / "wandb"), "--metric", "eval/reward", "--detector", "evalstop:k=2",
            "--poll", "0.2", "--grace", "10",
            "--", sys.executable, str(script), str(tmp_path), "10", "1.0"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=wandb_env(tmp_path), timeout=300)
    assert proc.returncode == 3, proc.stderr
    decided = [x.split(" ")[3] for x in proc.stderr.splitlines() if x.startswith("evalstop watch: step ")]
    assert decided[:5] == ["10", "20", "30", "40", "50"] and "STOP" in proc.stderr
    assert len(decided) < 10  # stopped before the run's last eval


def test_trainer_presets_read_the_wandb_step_the_trainer_logs(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from evalstop.sidecar.cli import add_arguments, build
    from evalstop.sidecar.cli import run as run_watch

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    wandb_log = ["--log", "wandb", "--logdir", "w", "--", "x"]
    options, _ = build(parser.parse_args(["--framework", "trl", *wandb_log]))
    assert options.step_key == "train/global_step"
    options, _ = build(parser.parse_args(["--metric", "m", *wandb_log]))
    assert options.step_key == "_step"
    assert run_watch(parser.parse_args(["--framework", "trl", "--log", "wandb", "--", "x"])) == 2
    assert "--logdir is required (the run's directory" in capsys.readouterr().err
