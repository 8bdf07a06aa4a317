"""deploy/container/build.sh and wheels.py refuse bad input in one line before anything is built,
and wheels.py's check catches a wheels folder that does not hold every requirement for the
base's Python (the image build would fail later, deep in pip's output)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "container" / "build.sh"
WHEELS = ROOT / "deploy" / "container" / "wheels.py"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("args", "message"), [
    (["--bogus"], "build.sh: unknown option --bogus (see the top of"),
    (["--base", "localhost/none", "--ca-file", "/nonexistent/ca.pem"], "build.sh: --ca-file: cannot read "
     "/nonexistent/ca.pem"),
])
def test_build_sh_refuses_bad_options_in_one_line(args: list[str], message: str) -> None:
    proc = _run("bash", str(BUILD), *args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def test_wheels_py_says_which_requirement_has_no_wheel_for_the_base(tmp_path: Path) -> None:
    """An empty folder (as if filled for another Python) fails the check, in one line."""
    check = ("import sys; sys.path.insert(0, sys.argv[1]); import wheels; from pathlib import Path; "
             "wheels.check(wheels.requirements(Path(sys.argv[2])), Path(sys.argv[3]), '3.11')")
    proc = _run(sys.executable, "-c", check, str(WHEELS.parent), str(ROOT), str(tmp_path))
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"wheels.py: {tmp_path} does not hold a wheel for Python 3.11 of every "
                           "requirement: ")
    assert "No matching distribution" in line or "Could not find a version" in line, line


def test_wheels_py_usage_is_status_2() -> None:
    proc = _run(sys.executable, str(WHEELS), "only-one-argument")
    assert proc.returncode == 2 and "REPO_ROOT WHEELS_DIR BASE_PYTHON" in proc.stderr
