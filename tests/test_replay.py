"""``evalstop replay``: CSV in, one verdict per job out."""

from __future__ import annotations

import argparse
import io
import math
import subprocess
import sys
from pathlib import Path

import pytest

from evalstop import replay
from evalstop.detectors import DEFAULT_SPEC, KDeclines, LossPlateau, parse_spec
from evalstop.replay import CurvesError, replay_rows

CURVES = """job_id,step,score
a,10,0.1
b,10,0.5
a,20,0.3
b,20,0.6
a,30,0.2
b,30,0.7
a,40,0.1
a,50,0.05
"""

EXPECTED = """job_id,stopped,stop_step,best_step,best_score,reason
a,true,40,20,0.3,2 consecutive declines vs previous (min_delta=0.0)
b,false,,30,0.7,0 consecutive declines < k=2
"""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="evalstop replay")
    replay.add_arguments(parser)
    return parser.parse_args(argv)


def write(tmp_path: Path, text: str, name: str = "curves.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def rows(*dicts: dict[str, str]) -> list[dict[str, str]]:
    return list(dicts)


# ---- replay_rows --------------------------------------------------------------------------------


def test_replay_rows_one_result_per_job_in_first_appearance_order() -> None:
    data = rows(
        {"job_id": "z", "step": "1", "score": "0.5"},
        {"job_id": "a", "step": "1", "score": "0.9"},
        {"job_id": "z", "step": "2", "score": "0.4"},
        {"job_id": "z", "step": "3", "score": "0.3"},
    )
    assert replay_rows(data, KDeclines()) == [
        {"job_id": "z", "stopped": True, "stop_step": 3, "best_step": 1, "best_score": 0.5,
         "reason": "2 consecutive declines vs previous (min_delta=0.0)", "n_invalid": 0},
        {"job_id": "a", "stopped": False, "stop_step": None, "best_step": 1, "best_score": 0.9,
         "reason": "0 consecutive declines < k=2", "n_invalid": 0},
    ]


def test_empty_and_nan_scores_are_skipped_not_fatal() -> None:
    data = rows(
        {"job_id": "j", "step": "1", "score": "0.5"},
        {"job_id": "j", "step": "2", "score": "0.4"},
        {"job_id": "j", "step": "3", "score": ""},
        {"job_id": "j", "step": "4", "score": "nan"},
        {"job_id": "j", "step": "5", "score": "0.3"},
    )
    [result] = replay_rows(data, KDeclines())
    assert (result["stopped"], result["stop_step"], result["best_step"]) == (True, 5, 1)


def test_all_scores_missing_gives_no_best() -> None:
    [result] = replay_rows(rows({"job_id": "j", "step": "1", "score": ""}), KDeclines())
    assert result == {
        "job_id": "j",
        "stopped": False,
        "stop_step": None,
        "best_step": None,
        "best_score": None,
        "reason": "0 consecutive declines < k=2",
        "n_invalid": 1,
    }


def test_optional_progress_and_loss_columns_feed_the_competitors() -> None:
    data = [
        {"job_id": "j", "step": str(s), "score": "0.5", "progress": str(s / 10), "loss": loss}
        for s, loss in zip(range(1, 8), ["1.0", "0.9", "0.8", "0.8", "", "0.8", "0.8"], strict=True)
    ]
    [fixed] = replay_rows(data, parse_spec("fixed-progress:at=0.3"))
    assert fixed["stop_step"] == 3
    [plateau] = replay_rows(data, LossPlateau(patience=3))
    assert plateau["stop_step"] == 7


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (
            rows({"job_id": "j", "step": "20", "score": "1"}, {"job_id": "j", "step": "10", "score": "1"}),
            r"line 3, job 'j': step 10 goes backwards \(previous step 20\)",
        ),
        (
            rows({"job_id": "j", "step": "1", "score": "high"}),
            r"line 2, job 'j': score must be a number, got 'high'",
        ),
        (
            rows({"job_id": "j", "step": "1", "score": "1"}, {"job_id": "k", "step": "1.5", "score": "1"}),
            r"line 3, job 'k': step must be an integer, got '1.5'",
        ),
        (
            rows({"job_id": "j", "step": "", "score": "1"}),
            r"line 2, job 'j': step must be an integer, got ''",
        ),
        (
            rows({"job_id": "j", "step": "1", "score": "1", "loss": "low"}),
            r"line 2, job 'j': loss must be a number, got 'low'",
        ),
        (rows({"job_id": "", "step": "1", "score": "1"}), r"line 2: empty job_id"),
        (rows({"job_id": "j", "step": "1"}), r"missing required column\(s\) score"),
    ],
)
def test_bad_rows_name_the_line_and_job(data: list[dict[str, str]], pattern: str) -> None:
    with pytest.raises(CurvesError, match=pattern):
        replay_rows(data, KDeclines())


def test_interleaved_jobs_check_steps_per_job() -> None:
    data = rows(
        {"job_id": "a", "step": "20", "score": "1"},
        {"job_id": "b", "step": "10", "score": "1"},
        {"job_id": "a", "step": "30", "score": "1"},
    )
    assert [r["job_id"] for r in replay_rows(data, KDeclines())] == ["a", "b"]
    duplicate = rows(
        {"job_id": "a", "step": "20", "score": "1"},
        {"job_id": "b", "step": "20", "score": "1"},
        {"job_id": "a", "step": "20", "score": "1"},
    )
    with pytest.raises(CurvesError, match=r"line 4, job 'a': step 20 appears twice .*first on line 2"):
        replay_rows(duplicate, KDeclines())


# ---- run() through argparse -----------------------------------------------------------------------


def test_default_detector_is_the_recommended_default(tmp_path: Path) -> None:
    assert parse([str(write(tmp_path, CURVES))]).detector == DEFAULT_SPEC


def test_run_writes_csv_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse([str(write(tmp_path, CURVES)), "--detector", "evalstop"])
    assert args.run(args) == 0
    out, err = capsys.readouterr()
    assert out == EXPECTED
    assert err == ""


def test_run_writes_csv_to_out(tmp_path: Path) -> None:
    out = tmp_path / "verdicts.csv"
    args = parse([str(write(tmp_path, CURVES)), "--detector", "evalstop:k=3", "--out", str(out)])
    assert replay.run(args) == 0
    assert (
        out.read_text()
        == "job_id,stopped,stop_step,best_step,best_score,reason\n"
        "a,true,50,20,0.3,3 consecutive declines vs previous (min_delta=0.0)\n"
        "b,false,,30,0.7,0 consecutive declines < k=3\n"
    )


def test_bad_spec_exits_2_with_the_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse([str(write(tmp_path, CURVES)), "--detector", "evalstop:k=0"])
    assert replay.run(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "The 'k' parameter of KDeclines must be an int >= 1 and <= 1000000. Got 0 instead." in err


def test_unknown_detector_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay.run(parse([str(write(tmp_path, CURVES)), "--detector", "nope"])) == 2
    assert (
        "Valid detectors: cusum, evalstop, fixed-progress, loss-plateau, mann-kendall, never, noise-aware, "
        "paired, patience, slaq" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("job_id,step\na,1\n", "missing required column(s) score; columns found: job_id, step"),
        ("", "missing required column(s) job_id, step, score; columns found: none"),
        ("job_id,step,score\na,2,0.1\na,1,0.2\n", "line 3, job 'a': step 1 goes backwards"),
    ],
)
def test_bad_curves_exit_1_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, pattern: str
) -> None:
    path = write(tmp_path, text)
    assert replay.run(parse([str(path)])) == 1
    err = capsys.readouterr().err
    assert str(path) in err and pattern in err


def test_missing_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay.run(parse([str(tmp_path / "absent.csv")])) == 1
    assert "absent.csv" in capsys.readouterr().err


def test_header_only_file_gives_header_only_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert replay.run(parse([str(write(tmp_path, "job_id,step,score\n"))])) == 0
    out, err = capsys.readouterr()
    assert out == "job_id,stopped,stop_step,best_step,best_score,reason\n"
    assert "has no rows after the header; nothing replayed" in err  # said, not silent


def test_best_score_is_written_at_full_precision(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    replay.run(parse([str(write(tmp_path, "job_id,step,score\nj,1,0.123456789012345\n")), "--out", str(out)]))
    assert out.read_text().splitlines()[1] == "j,false,,1,0.123456789012345,CUSUM 0 <= threshold=3.0"
    assert math.isclose(float(out.read_text().splitlines()[1].split(",")[4]), 0.123456789012345)


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_tty_with_many_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = "job_id,step,score\n" + "".join(f"j{i},1,0.5\n" for i in range(replay.PROGRESS_MIN_JOBS))
    args = parse([str(write(tmp_path, many)), "--out", str(tmp_path / "o.csv")])
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    assert replay.run(args) == 0
    assert tty.getvalue().endswith(f"replayed {replay.PROGRESS_MIN_JOBS}/{replay.PROGRESS_MIN_JOBS} jobs\n")
    few = FakeTTY()
    monkeypatch.setattr(sys, "stderr", few)
    assert replay.run(parse([str(write(tmp_path, CURVES)), "--out", str(tmp_path / "o.csv")])) == 0
    assert few.getvalue() == ""


# ---- through the real CLI (needs the other subcommands' modules) ----------------------------------


def _cli_or_skip() -> None:
    try:
        from evalstop import cli

        cli.build_parser()
    except ImportError as exc:  # cli.py imports experiments modules that may not exist yet
        pytest.skip(f"evalstop.cli cannot build its parser yet: {exc}")


def test_cli_main_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _cli_or_skip()
    from evalstop import cli

    assert cli.main(["replay", str(write(tmp_path, CURVES)), "--detector", "evalstop"]) == 0
    assert capsys.readouterr().out == EXPECTED


def test_cli_subprocess_replay(tmp_path: Path) -> None:
    _cli_or_skip()
    path = write(tmp_path, CURVES)
    cmd = [sys.executable, "-m", "evalstop.cli", "replay", str(path), "--detector", "evalstop:k=2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, EXPECTED), done.stderr
    bad = subprocess.run([*cmd[:-1], "evalstop:k=0"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2
    assert "The 'k' parameter of KDeclines" in bad.stderr


def test_the_columns_a_rule_needs_come_from_the_rule() -> None:
    # a rule declares what it reads: a new rule needs no table in the replay tool
    class NeedsProgressAndLoss(KDeclines):
        reads = ("progress", "loss")

    rule = NeedsProgressAndLoss(k=2)
    replay.check_columns(["job_id", "step", "score", "progress", "loss"], rule)
    with pytest.raises(CurvesError, match=r"rule needs a 'loss' column"):
        replay.check_columns(["job_id", "step", "score", "progress"], rule)
    replay.check_columns(["job_id", "step", "score"], KDeclines(k=2))
    rules = map(parse_spec, ("slaq", "paired", "fixed-progress", "cusum"))
    assert {type(r).__name__: r.reads for r in rules} == {
        "SlaqLoss": ("loss",), "Paired": ("items",), "FixedProgress": ("progress",), "Cusum": ()}
