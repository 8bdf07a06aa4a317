"""``evalstop replay --cadence ... --backfill``: at a stop, the skipped rows next to the best."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from evalstop import cli
from evalstop.detectors import parse_cadence, parse_spec
from evalstop.detectors._backfill import Neighbours, Slot
from evalstop.replay import replay_rows

RULE = "evalstop:k=1,against=best"

# every:3 runs rows 3, 6, 9 (steps 30, 60, 90). The best it sees is step 60 (0.7); the skipped
# step 50 (0.9) was better. The rule fires at step 90.
SCORES = [0.1, 0.2, 0.5, 0.6, 0.9, 0.7, 0.6, 0.5, 0.4]
CURVES = "job_id,step,score\n" + "".join(f"a,{10 * (i + 1)},{s}\n" for i, s in enumerate(SCORES)) + \
    "b,10,0.1\nb,20,0.2\nb,30,0.3\nb,40,0.4\nb,50,0.5\n"


def replay(cadence: str, backfill: bool = True) -> dict[str, dict]:
    rows = csv.DictReader(io.StringIO(CURVES))
    out = replay_rows(rows, parse_spec(RULE), cadence=parse_cadence(cadence), backfill=backfill)
    return {r["job_id"]: r for r in out}


def test_a_stop_backfills_the_skipped_rows_next_to_the_best_and_delivers_the_best() -> None:
    plain, filled = replay("every:3", backfill=False)["a"], replay("every:3")["a"]
    assert (plain["stop_step"], plain["best_step"], plain["evals_used"]) == (90, 60, 3)
    # steps 40, 50 before the best and 70, 80 after it were skipped: 4 more evals, 50 is the best
    assert (filled["stop_step"], filled["best_step"]) == (90, 60)
    assert (filled["delivered_step"], filled["evals_used"]) == (50, 3 + 4)


def test_a_run_that_is_not_stopped_delivers_its_last_row() -> None:
    got = replay("every:3")["b"]
    assert not got["stopped"] and got["delivered_step"] == 50 and got["evals_used"] == 1


def test_dense_replay_backfills_nothing() -> None:
    got = replay("every:1")["a"]
    assert got["stop_step"] == 60 and got["delivered_step"] == got["best_step"] == 50
    assert got["evals_used"] == 6


def test_only_skipped_rows_up_to_the_stop_count() -> None:
    near = Neighbours()
    for step, score, used in [(1, 0.1, False), (2, 0.5, True), (3, 0.9, False), (4, 0.3, True),
                              (5, 0.95, False)]:
        near.add(Slot(step, score, used), 2)
    # before the best (step 2): step 1; after it: steps 3 and 4 (5 is beyond the width of 2)
    assert near.backfill(1.0, 0.5, stop_step=4) == (3, 2)
    assert near.backfill(1.0, 0.5, stop_step=2) == (2, 1)  # step 3 is after the stop
    assert near.backfill(-1.0, 0.5, stop_step=4) == (1, 2)  # mode min: 0.1 is the best


def test_cli_backfill_needs_a_cadence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "curves.csv"
    path.write_text(CURVES)
    assert cli.main(["replay", str(path), "--detector", RULE, "--backfill"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backfill needs --cadence" in err[0]
    assert cli.main(["replay", str(path), "--detector", RULE, "--cadence", "every:3", "--backfill"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(",evals_used,delivered_step") and out[1].endswith(",7,50")
