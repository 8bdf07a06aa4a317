"""Bad input, command by command: each case gives an exit code and a message naming the field
or row (and, where there is one, the fix). Good inputs next to them must still pass."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from evalstop import cli

POLICY = '[[policy]]\nbase = "srtf"\n'
SMALL = 'seeds = [1]\n[workload]\nn_jobs = 50\n'

# (name, file name, file content, extra argv, exit code, regex the error must contain)
CASES = [
    # -- replay -------------------------------------------------------------------------
    ("replay duplicate (job, step)", "c.csv", "job_id,step,score\na,1,0.5\nb,1,0.4\na,1,0.5\n", [],
     1, r"line 4, job 'a': step 1 appears twice .*first on line 2"),
    ("replay step going backwards", "c.csv", "job_id,step,score\na,2,0.5\na,1,0.4\n", [],
     1, r"line 3, job 'a': step 1 goes backwards"),
    ("replay rule needs loss", "c.csv", "job_id,step,score\na,1,0.5\n", ["--detector", "loss-plateau"],
     1, r"'loss-plateau' rule needs a 'loss' column.*--detector"),
    ("replay slaq needs loss", "c.csv", "job_id,step,score,progress\na,1,0.5,0.1\n", ["--detector", "slaq"],
     1, r"'slaq' rule needs a 'loss' column"),
    ("replay rule needs progress", "c.csv", "job_id,step,score\na,1,0.5\n", ["--detector", "fixed-progress"],
     1, r"'fixed-progress' rule needs a 'progress' column"),
    ("replay truncated row", "c.csv", "job_id,step,score\na,1,0.5\na,2\n", [],
     1, r"line 3: the row ends early \(no value for score\).*truncated"),
    ("replay extra field", "c.csv", "job_id,step,score\na,1,0.5,9\n", [],
     1, r"line 2: more fields than the header"),
    ("replay missing column", "c.csv", "job,step,score\na,1,0.5\n", [],
     1, r"missing required column\(s\) job_id"),
    ("replay score not a number", "c.csv", "job_id,step,score\na,1,high\n", [],
     1, r"line 2, job 'a': score must be a number, got 'high'"),
    ("replay step not an integer", "c.csv", "job_id,step,score\na,1.5,0.5\n", [],
     1, r"line 2, job 'a': step must be an integer, got '1.5'"),
    ("replay paired needs items", "c.csv", "job_id,step,score\na,1,0.5\n", ["--detector", "paired"],
     1, r"'paired' rule needs a 'items' column.*--detector"),
    ("replay unknown rule", "c.csv", "job_id,step,score\na,1,0.5\n", ["--detector", "cusm"],
     2, r"cusm"),
    # -- simulate -----------------------------------------------------------------------
    ("simulate watch typo", "s.toml", SMALL + POLICY + 'detector = "cusum"\nwatch = ["rhlf"]\n', [],
     2, r"\[\[policy\]\] #1: 'watch' must be \"all\" or a list of job kinds from \['rlhf', 'lora', 'dpo'\]"
        r"\. Got \['rhlf'\]"),
    ("simulate watch bare string", "s.toml", SMALL + POLICY + 'watch = "rlhf"\n', [],
     2, r"'watch' must be \"all\" or a list of job kinds"),
    ("simulate empty seeds", "s.toml", "seeds = []\n" + POLICY, [],
     2, r"'seeds' must be a non-empty list of integers >= 0\. Got \[\]"),
    ("simulate negative seed", "s.toml", "seeds = [-1]\n" + POLICY, [], 2, r"'seeds' .*Got \[-1\]"),
    ("simulate seeds not a list", "s.toml", "seeds = 3\n" + POLICY, [],
     2, r"'seeds' must be a list of integers"),
    ("simulate duplicate labels", "s.toml", SMALL + POLICY + POLICY, [],
     2, r"policy labels must be unique: \['srtf'\].*'label'"),
    ("simulate quality_start scalar", "s.toml", "[workload]\nquality_start = 0.3\n" + POLICY, [],
     2, r"\[workload\]: 'quality_start' must be a list of 2 numbers\. Got 0\.3"),
    ("simulate quality_start 3 items", "s.toml", "[workload]\nquality_start = [0.1, 0.2, 0.3]\n" + POLICY, [],
     2, r"'quality_start' must be a list of 2 numbers\. Got \[0\.1, 0\.2, 0\.3\] \(3 item"),
    ("simulate unknown top key", "s.toml", "seed = [1]\n" + POLICY, [],
     2, r"unknown key\(s\) \['seed'\] in top level; valid keys: \['policy', 'seeds', 'sim', 'workload'\]"),
    ("simulate unknown workload key", "s.toml", "[workload]\nnjobs = 5\n" + POLICY, [],
     2, r"unknown key\(s\) \['njobs'\] in \[workload\]; valid keys: \[.*'n_jobs'"),
    ("simulate unknown policy key", "s.toml", POLICY + "detecter = 'cusum'\n", [],
     2, r"unknown key\(s\) \['detecter'\] in \[\[policy\]\] #1; valid keys: \[.*'detector'.*'oracle'"),
    ("simulate unknown base", "s.toml", '[[policy]]\nbase = "srft"\n', [],
     2, r"\[\[policy\]\] #1: 'base' must be one of \['fair', 'fifo', 'gittins', 'las', 'srtf'\]\. "
        r"Got 'srft'"),
    ("simulate bad detector", "s.toml", POLICY + 'detector = "evalstop:k=0"\n', [],
     2, r"\[\[policy\]\] #1 \(srtf\): .*'k'"),
    ("simulate bad preset", "s.toml", '[workload]\npreset = "papr"\n' + POLICY, [],
     2, r"'preset' must be one of \['paper', 'realistic'\]\. Got 'papr'"),
    ("simulate out of range", "s.toml", "[workload]\noffered_load = -1\n" + POLICY, [], 2, r"offered_load"),
    ("simulate no policy", "s.toml", "seeds = [1]\n", [],
     2, r"at least one \[\[policy\]\] table is required"),
    ("simulate wrong type", "s.toml", '[workload]\nn_jobs = "many"\n' + POLICY, [],
     2, r"\[workload\]: 'n_jobs' must be an integer\. Got 'many'"),
    ("simulate bad TOML", "s.toml", "seeds = [1\n", [], 2, r"s\.toml"),
]


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue()


@pytest.mark.parametrize(("name", "fname", "content", "extra", "code", "message"), CASES,
                         ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_field_or_row(
    tmp_path: Path, name: str, fname: str, content: str, extra: list[str], code: int, message: str,
) -> None:
    path = tmp_path / fname
    path.write_text(content, encoding="utf-8")
    command = "replay" if fname.endswith(".csv") else "simulate"
    got, err = _run([command, str(path), *extra])
    assert got == code, err
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
    assert re.search(message, err), err


@pytest.mark.parametrize("content", [
    "\ufeffjob_id,step,score\na,1,0.5\na,2,0.4\n",  # a UTF-8 byte-order mark (Excel writes one)
    "job_id,step,score,loss\na,1,0.5,\na,2,0.4,1.0\n",  # an empty cell is a missing value
])
def test_good_replay_input_is_accepted(tmp_path: Path, content: str) -> None:
    path = tmp_path / "c.csv"
    path.write_text(content, encoding="utf-8")
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["replay", str(path), "--detector", "evalstop:k=1"]) == 0
    assert out.getvalue().splitlines()[1].startswith("a,true,2,1,0.5")


def test_simulate_accepts_oracle_and_all(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SMALL + POLICY + '[[policy]]\nlabel = "o"\noracle = true\nwatch = "all"\n')
    code, err = _run(["simulate", str(path)])
    assert code == 0, err


def test_reproduce_and_validate_bad_options(tmp_path: Path) -> None:
    code, err = _run(["reproduce", "--study", "noize"])
    assert code == 2 and "unknown study ['noize']" in err and "'noise'" in err
    code, err = _run_or_exit(["reproduce", "--seeds", "1"])
    assert code == 2 and "evalstop reproduce: error: argument --seeds: must be an int from 2 to 1000" in err
    (tmp_path / "empty").mkdir()
    code, err = _run(["validate", "--supervised", str(tmp_path / "empty"), "--runs-per-family", "1"])
    assert code == 2 and "--supervised: no curve" in err and "--supervised none" in err


def _run_or_exit(argv: list[str]) -> tuple[int, str]:
    """``_run``, where argparse's own refusal (SystemExit 2) counts as the exit code; the last line."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, err.getvalue()


# -- issue 19: the newcomer's edges, each refused in one line (or warned about) ----------------------
@pytest.mark.parametrize(("argv", "message"), [
    (["--workers", "0"], "argument --workers: must be an int >= 1. Got 0 instead."),
    (["--workers", "-2"], "argument --workers: must be an int >= 1. Got -2 instead."),
    (["--quick", "--ray-address", "127.0.0.1:1"],
     "evalstop reproduce: --ray-address: for --all/--study only"),
    (["--quick", "--no-report"], "--no-report: for --all/--study only"),
    (["--study", "noise", "--preset", "realistic"], "--preset chooses the headline's workload"),
    (["--study", "k", "--out", "/proc/x"], "evalstop reproduce: cannot write results to /proc/x"),
])
def test_reproduce_options_it_would_ignore_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
) -> None:
    try:
        code = cli.main(["reproduce", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert message in err[-1] and "Traceback" not in "".join(err)


@pytest.mark.parametrize(("content", "message"), [
    ('{"studies": {', "results.json is not valid JSON"),
    ("{}", "results.json lacks 'studies', 'claims', 'tasks'"),
    ("[]", "holds a list, not the object"),
])
def test_report_of_a_broken_results_file_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "results.json").write_text(content)
    code, err = _run(["report", str(tmp_path)])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err and "evalstop reproduce --all --out" in err


def test_replay_says_why_a_job_was_not_stopped(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("job_id,step,score\n" + "".join(f"a,{i},{v}\n" for i, v in
                                                   enumerate([0.50, 0.61, 0.58, 0.55, 0.52, 0.48], 1)))
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["replay", str(path)]) == 0
    header, row = out.getvalue().splitlines()
    assert header.endswith(",reason") and row == "a,false,,2,0.61,CUSUM 2.87 <= threshold=3.0"


@pytest.mark.parametrize(("content", "warning"), [
    ("job_id,step,score\n", "has no rows after the header; nothing replayed"),
    ("job_id,step,score\na,1,nan\na,2,0.5\nb,1,\n",
     "2 NaN, inf or missing score(s) in 2 job(s) (first: 'a')"),
])
def test_replay_warns_instead_of_passing_in_silence(tmp_path: Path, content: str, warning: str) -> None:
    path = tmp_path / "c.csv"
    path.write_text(content)
    code, err = _run(["replay", str(path)])
    assert code == 0 and warning in err and len(err.strip().splitlines()) == 1, err


def test_messages_agree(capsys: pytest.CaptureFixture[str]) -> None:
    from evalstop.experiments.legend import COLUMNS
    from evalstop.experiments.simulate_cmd import metrics_table_from_rows

    with pytest.raises(SystemExit):
        cli.main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "under a minute" not in text and "a few seconds" in text
    row = {"policy": "p", "seed": 1, "precision": 1.0, "recall": 1.0, "fpr": 0.0, "jct_mean_s": 3600.0,
           "jct_p99_s": 7200.0, "wasted_gpu_hours": 1.0, "utilisation": 0.5}
    table = metrics_table_from_rows([row])
    assert "JCT mean h" in table and "JCT p99 h" in table and "p95" not in table.split("Columns:")[0]
    assert "95th and 99th" not in COLUMNS["JCT"]  # the legend promises no column a table lacks


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize(("blocked", "argv", "extra"), [
    ("uvicorn", ["serve", "--port", "8000"], "service"),
    ("fastapi", ["serve", "--port", "8000"], "service"),
])
def test_a_missing_extra_is_one_line_naming_the_install_command(
    blocked: str, argv: list[str], extra: str,
) -> None:
    proc = _python(f"import sys; sys.modules[{blocked!r}] = None\n"
                   f"from evalstop.cli import main; sys.exit(main({argv!r}))")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"pip install -e '.[{extra}]'" in lines[0] and "evalstop serve" in lines[0], lines


def test_version_and_help_are_for_users() -> None:
    from evalstop import __version__

    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["--version"])
    assert out.getvalue().strip() == f"evalstop {__version__}" and __version__[0].isdigit()
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["--help"])
    text = out.getvalue()
    assert "examples:" in text and "Stop reward-hacked" in text
    assert "add_arguments" not in text and "module" not in text


def test_ctrl_c_during_a_study_run_says_how_to_resume(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal sends it: one line, exit 130."""
    import os
    import signal
    import time

    # Enough seeds that the run lasts well past the first progress line on a fast machine
    # (3 seeds took 2 s in CI and finished before a fixed 4 s sleep); signal once it is running.
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalstop.cli", "reproduce", "--study", "noise", "--seeds", "40",
         "--out", str(tmp_path), "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if not line or " tasks" in line or ("/" in line and "%)" in line):
            break
    assert proc.poll() is None, "".join(seen)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    err = "".join(seen) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert "interrupted" in last and "run the same command again to resume" in last and "cache" in last


def test_a_partial_study_never_overwrites_the_full_report(tmp_path: Path) -> None:
    from evalstop.experiments.suite_cmd import study_dir

    assert study_dir(tmp_path, None) == tmp_path
    assert study_dir(tmp_path, ["noise"]) == tmp_path / "study-noise"
    assert study_dir(tmp_path, ["noise", "k", "noise"]) == tmp_path / "study-k+noise"


def test_every_install_hint_names_the_checkout_form() -> None:
    """Every message and docstring says ``pip install -e '.[extra]'`` (the README's form): a
    second spelling, such as ``pip install 'evalstop[hf]'``, is what a newcomer tripped on."""
    package = Path(cli.__file__).parent
    other = re.compile(r"pip install '?evalstop\[")
    found = [f"{path.relative_to(package)}:{n}" for path in sorted(package.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if other.search(line)]
    assert found == []
