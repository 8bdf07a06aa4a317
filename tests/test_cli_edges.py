"""The command line's edges a new user hits: each bad value is one line naming the option and
what it allows, exit 2, no traceback; nothing is ignored in silence."""

from __future__ import annotations

import io
import re
import socket
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from evalstop import cli
from evalstop.experiments.reproduce import MAX_SEEDS
from evalstop.experiments.sweep import Progress
from test_bad_input import _run_or_exit as _main


def _one_line_error(argv: list[str]) -> str:
    """The last stderr line of a refusal, after checking exit 2 and that nothing else went wrong
    (argparse prints its usage first; our own refusals print just the line)."""
    code, err = _main(argv)
    assert code == 2, err
    assert "Traceback" not in err and err.strip(), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 or lines[0].startswith("usage:"), err
    return lines[-1]


@pytest.mark.parametrize(("argv", "message"), [
    # 1: a number too large for anything was an OverflowError traceback
    (["reproduce", "--seeds", "99999999999999999999"],
     f"argument --seeds: must be an int from 2 to {MAX_SEEDS} "),
    # 2: ten million seeds ran for 20 s in silence while memory grew; now a documented bound
    (["reproduce", "--seeds", "10000000"], f"argument --seeds: must be an int from 2 to {MAX_SEEDS} "),
    (["reproduce", "--all", "--seeds", str(MAX_SEEDS + 1)], "argument --seeds: must be an int from 2 to"),
    (["reproduce", "--seeds", "1"], "(paired statistics need two"),
    # 3: --quick with --seeds silently ran 8 seeds
    (["reproduce", "--quick", "--seeds", "3"], "--quick sets the seeds (8, or 5 per study with --all"),
    (["reproduce", "--all", "--quick", "--seeds", "3"], "give --quick or --seeds, not both"),
    # 6: the bank's seed, without the option's name
    (["bank", "--seed", "-1"], "argument --seed: must be an int >= 0. Got -1 instead."),
    (["bank", "--runs-per-family", "0"], "argument --runs-per-family: must be an int >= 1. Got 0 instead."),
    # 8: rewind's training options without --train changed nothing and said nothing
    (["rewind", "--seed", "5"], "--seed: for --train only"),
    (["rewind", "--seeds", "3", "--jobs", "2"], "--seeds, --jobs: for --train only"),
    (["rewind", "--proxy", "learned"], "--proxy: for --train only"),
    (["rewind", "--train", "--proxy", "mlp"], "argument --proxy: invalid choice: 'mlp'"),
    (["rewind", "--train", "--runs", "x.json.gz"], "--runs: reads recorded runs instead of training"),
    (["rewind", "--seed", "-3"], "argument --seed: must be an int >= 0. Got -3 instead."),
    (["rewind", "--platform", "-1"], "argument --platform: must be an int >= 0. Got -1 instead."),
])
def test_bad_option_values_are_one_line_naming_the_option_and_range(argv: list[str], message: str) -> None:
    assert message in _one_line_error(argv)


def test_simulate_refuses_a_workload_that_cannot_fit_in_memory_before_allocating(tmp_path: Path) -> None:
    """4: n_jobs = 10^12 was a 44-line traceback ending in numpy's 'Unable to allocate 7.28 TiB'."""
    config = tmp_path / "s.toml"
    config.write_text('seeds = [1]\n[workload]\nn_jobs = 1000000000000\n[[policy]]\nbase = "srtf"\n')
    line = _one_line_error(["simulate", str(config)])
    m = re.search(r"\[workload\] n_jobs = 1,000,000,000,000 needs about ([\d,.]+) GiB of memory .*"
                  r"([\d,.]+) GiB is available: n_jobs <= ([\d,]+) fits", line)
    assert m, line
    fits = int(m.group(3).replace(",", ""))
    assert 0 < fits < 10**12


def test_simulate_memory_estimate_follows_the_seeds_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalstop.experiments import simulate_cmd
    from evalstop.experiments.simulate_cmd import load_config, memory_refusal

    monkeypatch.setattr(simulate_cmd, "available_memory_bytes", lambda: 2 * 2**30)
    monkeypatch.setattr(simulate_cmd.os, "cpu_count", lambda: 2)
    doc = {"seeds": [1], "workload": {"n_jobs": 1_000_000}, "policy": [{"base": "srtf"}]}
    assert memory_refusal(load_config(doc)) is None  # about 1.4 GiB: fits in 2 GiB
    refusal = memory_refusal(load_config(doc | {"seeds": [1, 2]}))  # two processes: does not
    assert refusal is not None and "(2 seed(s) at once" in refusal


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d / "missing.json.gz", "No such file or directory"),
    (lambda d: (d / "plain.json.gz").write_text("{}") and d / "plain.json.gz", "Not a gzipped file"),
])
def test_rewind_runs_that_cannot_be_read_are_one_line(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    """5: a missing --runs file was a 20-line FileNotFoundError traceback."""
    path = make(tmp_path)
    line = _one_line_error(["rewind", "--runs", str(path)])
    assert line.startswith(f"evalstop rewind: --runs {path}: cannot read the runs") and message in line


def test_rewind_runs_of_another_shape_are_one_line(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "other.json.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"rows": []}')
    assert "not the runs of `evalstop rewind --train`" in _one_line_error(["rewind", "--runs", str(path)])


def _held_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize("where", ["port", "host", "name"])
def test_serve_says_in_one_line_that_it_cannot_listen_before_anything_starts(
    tmp_path: Path, where: str,
) -> None:
    """7: a port in use printed six uvicorn lines ('Application startup complete.' among them)
    and exited 3; an address of another machine, the same."""
    pytest.importorskip("uvicorn", reason="evalstop serve needs the service extra")
    with _held_port() as held:
        port = held.getsockname()[1]
        argv = {"port": ["--port", str(port)], "host": ["--host", "192.0.2.1", "--port", "0"],
                "name": ["--host", "no-such-host.invalid"]}[where]
        proc = subprocess.run([sys.executable, "-m", "evalstop.cli", "serve", *argv,
                               "--database-url", f"sqlite:///{tmp_path / 'x.db'}"],
                              capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    expected = {"port": f"--port {port}: 127.0.0.1:{port} is already in use",
                "host": "--host 192.0.2.1: not an address of this machine",
                "name": "--host no-such-host.invalid: not an address or a name this machine resolves"}[where]
    assert expected in lines[0]
    assert not (tmp_path / "x.db").exists()  # nothing started: not even the database


def test_a_resumed_run_counts_only_the_tasks_run_now_in_its_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """9: after a resume the cached tasks made the rate look instant ('elapsed 0 s ETA 0 s')."""
    clock = [100.0]
    monkeypatch.setattr("evalstop.experiments.sweep.time.perf_counter", lambda: clock[0])
    out = io.StringIO()
    progress = Progress(100, "reproduce --all", stream=out, every_s=0.0)
    progress.advance(90, cached=True)
    assert "90/100 (90 %, 90 from the cache) elapsed 0 s ETA ?" in out.getvalue()
    clock[0] += 10.0  # one task run now took 10 s: 9 left take 90 s, not 1 s
    progress.advance()
    assert out.getvalue().splitlines()[-1].endswith("91/100 (91 %, 90 from the cache) elapsed 10 s ETA 90 s")


def test_report_of_a_path_that_is_not_a_results_directory_does_not_suggest_writing_to_it(
    tmp_path: Path,
) -> None:
    """10: `evalstop report good.csv` suggested `evalstop reproduce --all --out good.csv`."""
    good = tmp_path / "good.csv"
    good.write_text("job_id,step,score\n")
    for path, what in ((good, "is a file"), (tmp_path / "nowhere", "does not exist")):
        line = _one_line_error(["report", str(path)])
        assert f"RESULTS_DIR {path} {what}" in line and "--out " + str(path) not in line, line
    (tmp_path / "empty").mkdir()  # a directory without results: the suggestion fits it
    assert f"--out {tmp_path / 'empty'}" in _one_line_error(["report", str(tmp_path / "empty")])


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return out.getvalue()


def test_no_help_text_names_an_internal_issue_number() -> None:
    """11: `evalstop --help` and `evalstop rewind --help` said "(issue 23's study)"."""
    texts = {"evalstop": _help([])} | {name: _help([name]) for name, _, _ in cli.COMMANDS}
    found = {name: m.group(0) for name, text in texts.items()
             if (m := re.search(r"\b[Ii]ssue\s*#?\d+", text))}
    assert found == {}
    assert "rewind instead of stop" in texts["evalstop"]


def test_a_long_headline_run_shows_progress_in_a_log_too(capsys: pytest.CaptureFixture[str]) -> None:
    from evalstop.experiments.runner import stderr_progress

    report = stderr_progress("reproduce", every_s=0.0)  # not a terminal: a line per interval
    report(1, 4)
    quiet = stderr_progress("reproduce")  # a short run in a log: nothing
    quiet(4, 4)
    assert capsys.readouterr().err == "reproduce: 1/4 seeds\n"
