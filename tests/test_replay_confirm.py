"""``evalstop replay --confirm``: the confirm_* columns answer each alarm's confirmation eval."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from evalstop import cli
from evalstop.detectors import Confirm, parse_cadence, parse_spec
from evalstop.replay import replay_rows

RULE = "evalstop:k=1,against=best"

# spike: one eval far below the rest at step 40, which its confirmation (0.69) does not bear out;
# decline: a real fall from step 40, confirmed (0.41 +- 0.02 against the best 0.7 +- 0.04)
CURVES = """job_id,step,score,stderr,confirm_score,confirm_stderr,confirm_items
spike,10,0.5,0.04,,,
spike,20,0.6,0.04,,,
spike,30,0.7,0.04,,,
spike,40,0.3,0.04,0.69,0.02,
spike,50,0.72,0.04,,,
spike,60,0.75,0.04,,,
decline,10,0.5,0.04,,,
decline,20,0.6,0.04,,,
decline,30,0.7,0.04,,,
decline,40,0.4,0.04,0.41,0.02,
decline,50,0.3,0.04,0.3,0.02,
"""


DEFAULT = Confirm()


def replay(text: str, confirm: Confirm | None = DEFAULT, cadence: str | None = None) -> dict[str, dict]:
    rows = csv.DictReader(io.StringIO(text))
    policy = None if cadence is None else parse_cadence(cadence)
    return {r["job_id"]: r for r in replay_rows(rows, parse_spec(RULE), cadence=policy, confirm=confirm)}


def test_a_noise_spike_is_cleared_and_a_real_decline_stopped_at_the_same_step() -> None:
    plain, confirmed = replay(CURVES, None), replay(CURVES)
    assert plain["spike"]["stop_step"] == 40 and not confirmed["spike"]["stopped"]
    assert confirmed["spike"]["best_step"] == 60
    assert plain["decline"]["stop_step"] == confirmed["decline"]["stop_step"] == 40
    assert plain["decline"]["best_step"] == confirmed["decline"]["best_step"] == 30
    assert "confirmed (unpaired, z=6.48 >= 3)" in confirmed["decline"]["reason"]


def test_evals_used_counts_each_confirmation_at_its_size() -> None:
    got = replay(CURVES)
    assert got["spike"]["evals_used"] == 6 + 4  # every row, and one confirmation of 4
    assert got["decline"]["evals_used"] == 4 + 4  # stopped at the 4th row, after its confirmation
    assert replay(CURVES, Confirm(size=8))["spike"]["evals_used"] == 6 + 8


def test_with_a_cadence_only_the_rows_it_runs_raise_alarms() -> None:
    # every:2 runs rows 2, 4, 6: the spike at row 4 raises the alarm, its confirmation clears it
    got = replay(CURVES, cadence="every:2")
    assert not got["spike"]["stopped"] and got["spike"]["evals_used"] == 3 + 4
    assert got["decline"]["stop_step"] == 40 and got["decline"]["evals_used"] == 2 + 4


def test_paired_items_column() -> None:
    text = (
        "job_id,step,score,items,confirm_score,confirm_items\n"
        "j,10,0.2,0.2;0.2;0.2,,\n"
        "j,20,0.5,1.0;0.0;0.5,,\n"
        "j,30,0.3,0.75;0.0;0.25,0.4,0.75;-0.25;0.25;0.5;0.5;0.5\n"
    )
    got = replay(text)["j"]
    # paired on the 3 shared prompts: drops 0.25, 0.25, 0.25 (no spread) -> agrees
    assert got["stopped"] and "confirmed (paired on 3 items, drop 0.25 with no spread)" in got["reason"]


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "curves.csv"
    path.write_text(text)
    return str(path)


def test_cli_confirm_adds_evals_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", write(tmp_path, CURVES), "--detector", RULE, "--confirm"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(",evals_used")
    assert out[1].startswith("spike,false,,60,0.75,") and out[1].endswith(",10")
    assert out[2].startswith("decline,true,40,30,0.7,") and out[2].endswith(",8")
    assert cli.main(["replay", write(tmp_path, CURVES), "--detector", RULE, "--confirm", "size=2,z=3"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith(",8")


def test_cli_refuses_confirm_without_the_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "job_id,step,score\na,10,0.5\n")
    assert cli.main(["replay", path, "--confirm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--confirm needs a 'confirm_score' column" in err[0]


def test_cli_refuses_bad_confirm_parameters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["replay", write(tmp_path, CURVES), "--confirm", "size=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'size' parameter of Confirm must be an int >= 1 and <= 100. Got 0" in err[0]
