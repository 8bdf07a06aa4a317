"""Fill the image's wheels folder from the host's pip, for the base image's Python (build.sh).

    python3 deploy/container/wheels.py REPO_ROOT WHEELS_DIR BASE_PYTHON   (e.g. 3.11)

Every requirement of ``evalstop[service]`` and of its build backend (``setuptools>=77``) gets a
wheel in WHEELS_DIR, made with the host pip's own index, certificate and proxy settings: built by
``pip wheel`` when the host's Python is BASE_PYTHON, else downloaded as binary wheels for
BASE_PYTHON on this machine's architecture. Wheels already there are used first. Then pip
resolves the whole set again from WHEELS_DIR alone (none of the host's pip settings), for
BASE_PYTHON: a wheel that does not fit
(another Python, a missing dependency) fails here, in one line, not in the image build.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

#: bookworm's glibc is 2.36; manylinux wheels up to it install on a Debian 12 base
MANYLINUX = [f"manylinux_2_{minor}" for minor in range(17, 37)] + ["manylinux2014"]


def requirements(root: Path) -> list[str]:
    project = tomllib.loads((root / "pyproject.toml").read_text())
    return [*project["project"]["dependencies"], *project["project"]["optional-dependencies"]["service"],
            *project["build-system"]["requires"]]


def target_options(python: str) -> list[str]:
    """pip options that select binary wheels for CPython ``python`` on this architecture."""
    machine = platform.machine()
    tags = [*MANYLINUX, "linux"]  # linux_*: what the host's pip builds from an sdist
    platforms = [a for tag in tags for a in ("--platform", f"{tag}_{machine}")]
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp", *platforms]


def pip(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=900,
                          env=env)


def without_host_settings() -> dict[str, str]:
    """The environment with none of the host's pip settings (no PIP_* variable, no config file):
    what the image's build stage has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def fill(needs: list[str], wheels: Path, python: str) -> None:
    host = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if host == python:
        get = ["wheel", "-q", "--wheel-dir", str(wheels)]
    else:
        get = ["download", "-q", "--dest", str(wheels), *target_options(python)]
    if pip(*get, "--no-index", "--find-links", str(wheels), *needs).returncode == 0:
        return
    fetched = pip(*get, "--find-links", str(wheels), *needs)
    if fetched.returncode != 0:
        tail = (fetched.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"wheels.py: the host's pip could not get the wheels for Python {python}: {tail}")


def check(needs: list[str], wheels: Path, python: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        proc = pip("download", "-q", "--no-index", "--find-links", str(wheels), "--dest", scratch,
                   *target_options(python), *needs, env=without_host_settings())
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"wheels.py: {wheels} does not hold a wheel for Python {python} of every "
                         f"requirement: {tail}")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, wheels, python = Path(argv[0]), Path(argv[1]), argv[2]
    wheels.mkdir(parents=True, exist_ok=True)
    needs = requirements(root)
    fill(needs, wheels, python)
    check(needs, wheels, python)
    print(f"wheels.py: {len(list(wheels.glob('*.whl')))} wheels in {wheels} fit Python {python}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
