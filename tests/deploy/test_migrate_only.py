"""``evalstop serve --migrate-only``, the migration job of every deployment, on a PostgreSQL with
password authentication: a wrong password is one line and status 2 (as for ``serve``); a
migration logs one line at the default level and Alembic's own lines at ``--log-level debug``
only (docs/service.md says so)."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._podman import ROOT, start_postgres, stop_postgres


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pg() -> Iterator[tuple[int, str]]:
    """A PostgreSQL cluster with scram-sha-256 password auth; yields (port, password)."""
    if os.geteuid() != 0 or not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        if os.environ.get("CI") == "true":
            pytest.fail("needs root and PostgreSQL's binaries (scripts/setup.d/20-service.sh)")
        pytest.skip("needs root and PostgreSQL's binaries")
    root = Path(tempfile.mkdtemp(prefix="evalstop-migrate-pg-"))
    password, port = secrets.token_hex(12), _free_port()
    pg_ctl, data = start_postgres(root, port, password)
    try:
        yield port, password
    finally:
        stop_postgres(pg_ctl, data)
        shutil.rmtree(root, ignore_errors=True)


def _migrate(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSTOP_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "evalstop.cli", "serve", "--migrate-only", "--database-url",
                           url, *extra], capture_output=True, text=True, timeout=120, env=env)


def test_a_wrong_password_is_one_line_and_status_2(pg: tuple[int, str]) -> None:
    port, _ = pg
    proc = _migrate(f"postgresql://evalstop:not-the-password@127.0.0.1:{port}/postgres")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith("evalstop serve --migrate-only: cannot open the database "
                               f"'postgresql://evalstop:***@127.0.0.1:{port}/postgres': ")
    assert "password authentication failed" in lines[0]
    assert "not-the-password" not in proc.stderr


def test_migrations_log_one_line_at_info_and_alembic_at_debug_only(pg: tuple[int, str]) -> None:
    port, password = pg
    url = f"postgresql://evalstop:{password}@127.0.0.1:{port}/postgres"
    first = _migrate(url)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "alembic" not in first.stderr
    assert [line.split(": ", 1)[1] for line in first.stderr.strip().splitlines()] == [
        f"schema at revision {_head()}, this release's head"]
    again = _migrate(url, "--log-level", "debug")  # a second run finds it done; alembic says so
    assert again.returncode == 0, again.stderr[-3000:]
    assert "alembic.runtime.migration" in again.stderr


def _head() -> str:
    from evalstop.service.store.migrate import head_revision

    return head_revision()


def _serve(*argv: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSTOP_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-m", "evalstop.cli", "serve", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_wait_for_schema_ends_when_the_migration_has_run_or_gives_up_in_one_line(tmp_path: Path) -> None:
    """The replicas' init container: no CrashLoopBackOff while the migration Job runs."""
    url = f"sqlite:///{tmp_path / 'e.db'}"
    gave_up = _serve("--database-url", url, "--wait-for-schema", "1")
    _, err = gave_up.communicate(timeout=60)
    assert gave_up.returncode == 2
    assert err.strip().splitlines()[-1] == (
        "evalstop serve --wait-for-schema: gave up after 1 s: the database schema is at revision none, this "
        f"release needs {_head()}: run the migration job (evalstop serve --migrate-only) first")
    waiting = _serve("--database-url", url, "--wait-for-schema", "120")
    time.sleep(3)
    assert waiting.poll() is None  # still waiting: nothing migrated yet
    assert _migrate(url).returncode == 0
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err[-2000:]
    assert f"schema at revision {_head()}, this release's head" in err


@pytest.mark.parametrize("bad", ["0", "-3", "soon", "inf"])
def test_wait_for_schema_refuses_a_bad_duration(bad: str) -> None:
    proc = _serve("--wait-for-schema", bad)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"argument --wait-for-schema: must be a number of seconds > 0. Got {bad!r} instead." in err
