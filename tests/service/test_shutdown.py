"""What a deployment relies on (docs/deploy.md): the outbox leases handed back at shutdown, the
schema check of a replica that may not migrate, ``serve --migrate-only``, and SIGTERM ending
``evalstop serve`` with status 0 after draining."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from evalstop.service.app import create_app
from evalstop.service.store import open_store, outbox
from evalstop.service.store.migrate import SchemaNotCurrent, head_revision
from evalstop.service.worker import Lease, LeaseLost, Worker

from ._support import ADMIN, Api, free_port, make_settings, wait_for

DECLINING = [0.5, 0.6, 0.61, 0.55, 0.5]


def _decided_stop(api: Api) -> int:
    token = api.tenant("acme")
    job = api.job(token, grace_period_s=0)
    for step, value in enumerate(DECLINING):
        assert api.post(token, job["id"], {"step": step, "value": value}).status_code == 200
    with api.ctx.store.engine.connect() as conn:
        return int(conn.execute(sa.select(outbox.c.id)).scalar_one())


def test_release_leases_hands_a_claimed_row_to_another_worker(api_any_db: Api) -> None:
    api = api_any_db
    row_id = _decided_stop(api)
    first = api.ctx.worker
    claimed = first._claim()
    assert claimed is not None and claimed[0] == row_id
    other = Worker(api.ctx.store, api.ctx.adapters)
    assert other._claim() is None  # leased: nobody else takes it before the lease expires
    assert first.release_leases() == 1
    assert first.release_leases() == 0
    taken = other._claim()
    assert taken is not None and taken[0] == row_id  # at once, not after worker_lease_s
    with pytest.raises(LeaseLost):  # the first worker's late write is fenced off
        first._set(Lease(row_id, claimed[1]), phase="signal")


def test_a_replica_that_may_not_migrate_refuses_another_schema(sqlite_url: str) -> None:
    with pytest.raises(SchemaNotCurrent, match=f"at revision none, this release needs {head_revision()}"):
        create_app(make_settings(sqlite_url, migrate_on_start=False))
    open_store(sqlite_url).dispose()  # the migration job
    app = create_app(make_settings(sqlite_url, migrate_on_start=False))
    app.state.ctx.store.dispose()


def _serve(db: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "evalstop.cli", "serve", "--database-url", f"sqlite:///{db}",
            "--port", str(port)]
    return subprocess.Popen(argv, env={**os.environ, "EVALSTOP_ADMIN_TOKEN": ADMIN, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_migrate_only_then_serve_without_migrating_then_sigterm_exits_0(tmp_path: Path) -> None:
    db = tmp_path / "evalstop.db"
    refused = _serve(db, free_port(), EVALSTOP_MIGRATE_ON_START="false")
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 2 and b"--migrate-only" in err, err[-2000:]
    migrate = subprocess.run([sys.executable, "-m", "evalstop.cli", "serve", "--migrate-only",
                              "--database-url", f"sqlite:///{db}"], capture_output=True, timeout=60)
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    port = free_port()
    server = _serve(db, port, EVALSTOP_MIGRATE_ON_START="false")
    try:
        wait_for(lambda: _ready(port), 60, "the server to be ready")
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0, err[-2000:]
    assert b"Application shutdown complete" in err


def test_an_unreadable_admin_token_file_is_one_line_and_status_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token"
    proc = subprocess.run([sys.executable, "-m", "evalstop.cli", "serve", "--database-url",
                           f"sqlite:///{tmp_path / 'e.db'}"], capture_output=True, timeout=60,
                          env={**os.environ, "EVALSTOP_ADMIN_TOKEN_FILE": str(missing)})
    assert proc.returncode == 2
    assert proc.stderr.decode().strip().splitlines()[-1] == (
        f"evalstop serve: admin_token_file {str(missing)!r} cannot be read (FileNotFoundError)")


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
