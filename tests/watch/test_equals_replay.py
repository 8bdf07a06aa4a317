"""evalstop watch decides as evalstop replay does: the same curve, as a TensorBoard log for the
sidecar and as a CSV for replay, gives byte-identical verdict files for every score-only rule."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from evalstop.cli import main

torch_tb = pytest.importorskip("torch.utils.tensorboard")

RULES = ["cusum:threshold=3.0,drift=3.0", "evalstop:k=2,against=best,min_delta=0.02", "evalstop:k=3",
         "patience", "mann-kendall", "noise-aware", "never", "cusum:mode=min"]
rng = np.random.default_rng(7)
CURVES = {
    "hacks": [0.2, 0.35, 0.5, 0.62, 0.6, 0.57, 0.51, 0.49, 0.42, 0.4, 0.33, 0.3, 0.2],
    "noisy": list(0.5 + 0.05 * np.sin(np.arange(40) / 3) + rng.normal(0, 0.03, 40)),
    "with-nan": [0.3, 0.4, math.nan, 0.5, 0.45, math.inf, 0.41, 0.38, 0.3, 0.31, 0.2],
}


def write_log(logdir: Path, curve: list[float]) -> list[float]:
    """The curve as SummaryWriter logs it (float32, every 10 steps); the values as stored."""
    writer = torch_tb.SummaryWriter(str(logdir))
    for i, value in enumerate(curve, start=1):
        writer.add_scalar("eval/score", value, 10 * i)
        writer.add_scalar("train/loss", 1.0 / i, 10 * i)
    writer.close()
    return [float(np.float32(v)) for v in curve]


@pytest.mark.parametrize("curve", sorted(CURVES))
def test_verdicts_equal_replay_byte_for_byte(tmp_path: Path, curve: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    stored = write_log(tmp_path / "tb", CURVES[curve])
    csv = tmp_path / "curves.csv"
    rows = "".join(f"{curve},{10 * i},{v!r}\n" for i, v in enumerate(stored, 1))
    csv.write_text("job_id,step,score\n" + rows)
    for rule in RULES:
        watched, replayed = tmp_path / "watch.csv", tmp_path / "replay.csv"
        code = main(["watch", "--metric", "eval/score", "--logdir", str(tmp_path / "tb"),
                     "--detector", rule, "--shadow", "--poll", "0.05", "--job-id", curve,
                     "--verdicts", str(watched), "--", sys.executable, "-c", "pass"])
        assert code == 0
        assert main(["replay", str(csv), "--detector", rule, "--out", str(replayed)]) == 0
        assert watched.read_bytes() == replayed.read_bytes(), rule
        stop_step = replayed.read_text().splitlines()[1].split(",")[2]
        decided = int(stop_step) // 10 if stop_step else len(stored)
        assert capsys.readouterr().err.count("evalstop watch: step ") == decided  # one line per eval
