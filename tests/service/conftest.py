"""Fixtures for the service tests: settings, an in-process client, a throwaway PostgreSQL."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed: pip install -e '.[service]'")

from fastapi.testclient import TestClient

from evalstop.service.app import create_app
from evalstop.service.store import Store, metadata, open_store

from ._support import Api, free_port, make_settings


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'evalstop.db'}"


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    with TestClient(create_app(make_settings(sqlite_url))) as client:
        yield Api(client)


# -- PostgreSQL -----------------------------------------------------------------------------------
def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _pg_user() -> str:
    for name in ("postgres", "evalstop-pg"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "evalstop-pg"], check=True)
    return "evalstop-pg"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server on a free loopback port; dropped at the end."""
    bindir = _pg_bin()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL binaries not found; scripts/setup.d/20-service.sh should install them")
        pytest.skip("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
    user = _pg_user()
    root = Path(tempfile.mkdtemp(prefix="evalstop-pg-"))
    shutil.chown(root, user)
    data, port = root / "data", free_port()

    def as_user(*cmd: str) -> None:
        prefix = ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=120)

    as_user(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    as_user(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        as_user(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, sqlite_url: str) -> Iterator[str]:
    """The same test on SQLite and on a real PostgreSQL (tables dropped after each test)."""
    if request.param == "sqlite":
        yield sqlite_url
        return
    url = request.getfixturevalue("postgres_url")
    yield url
    store = open_store(url)
    metadata.drop_all(store.engine)
    store.dispose()


@pytest.fixture
def api_any_db(db_url: str) -> Iterator[Api]:
    """The in-process API on SQLite and on PostgreSQL."""
    with TestClient(create_app(make_settings(db_url))) as client:
        yield Api(client)


@pytest.fixture
def store_factory(db_url: str) -> Iterator[Callable[..., Store]]:
    made: list[Store] = []

    def make(**kwargs: Any) -> Store:
        made.append(open_store(db_url, **kwargs))
        return made[-1]

    yield make
    for s in made:
        s.dispose()
