"""The service image, for real: built with podman on a local Debian base (no registry is
reachable in CI), a migration container, two replica containers on a host PostgreSQL, a webhook
receiver on the host.

Checked: the image runs as non-root with no pip index settings in it; the migration runs once,
and replicas started with ``EVALSTOP_MIGRATE_ON_START=false`` only check the schema; the admin
token comes from a mounted file; a declining curve is stopped and the stop delivered once; after
one replica is SIGKILLed every acknowledged score is kept; SIGTERM makes the other exit with
status 0 within its grace period. Figures (``pytest -s``): image size, build time, cold start
to ``/readyz``, the test's own time.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ._podman import IMAGE, LIMITS, RUN_OPTS, Receiver, podman, start_postgres, stop_postgres, wait_until

pytestmark = pytest.mark.slow
GRACE_S = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def test_image_keeps_no_pip_settings_and_runs_as_non_root(image: dict[str, float]) -> None:
    inspect = json.loads(podman("image", "inspect", IMAGE).stdout)[0]
    env = inspect["Config"]["Env"]
    assert not [e for e in env if e.startswith("PIP_")], env
    history = podman("history", "--no-trunc", IMAGE).stdout
    assert "sentinel" not in history and "PIP_NO_INDEX" not in history
    assert inspect["Config"]["User"] == "10001:10001"
    assert "/readyz" in inspect["Healthcheck"]["Test"][-1]  # kept: built with --format docker
    out = podman("run", "--rm", *RUN_OPTS, *LIMITS, "--network=none", "--entrypoint", "sh", IMAGE, "-c",
                 "id -u; pip config list 2>&1; cat /etc/pip.conf 2>/dev/null; env").stdout
    assert out.splitlines()[0] == "10001"
    assert "sentinel" not in out and "PIP_" not in out, out


class Replica:
    def __init__(self, name: str, env: dict[str, str], token_file: Path) -> None:
        self.name, self.env, self.token_file = f"evalstop-ci-{name}", env, token_file
        self.base = ""

    def start(self) -> float:
        """Start the container; seconds from ``podman run`` to ``/readyz`` answering 200."""
        podman("rm", "-f", "-v", self.name, check=False)
        env = [a for k, v in self.env.items() for a in ("-e", f"{k}={v}")]
        t0 = time.monotonic()
        podman("run", "-d", "--name", self.name, *RUN_OPTS, *LIMITS, "-p", "127.0.0.1::8000",
               "-v", f"{self.token_file}:/run/secrets/evalstop/admin-token:ro", *env, IMAGE)
        port = podman("port", self.name, "8000").stdout.strip().rsplit(":", 1)[1]
        self.base = f"http://127.0.0.1:{port}"
        wait_until(self.ready, 120, f"{self.name} /readyz")
        return time.monotonic() - t0

    def ready(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name).stdout.strip()
        assert state == "true", podman("logs", self.name, check=False).stderr[-3000:]
        try:
            return httpx.get(self.base + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def logs(self) -> str:
        proc = podman("logs", self.name, check=False)
        return proc.stdout + proc.stderr


def decline(n: int, peak: int) -> list[float]:
    return [0.3 + 0.01 * s if s <= peak else 0.3 + 0.01 * peak - 0.02 * (s - peak) for s in range(n)]


def test_two_replicas_in_containers(image: dict[str, float], tmp_path: Path) -> None:
    t0 = time.monotonic()
    tmp_path.chmod(0o755)
    pg_root = Path(tempfile.mkdtemp(prefix="evalstop-ci-pg-"))
    password, admin = secrets.token_hex(16), secrets.token_hex(24)
    pg_port = _free_port()
    pg_ctl, pg_data = start_postgres(pg_root, pg_port, password)
    token_file = tmp_path / "admin-token"
    token_file.write_text(admin + "\n")
    os.chown(token_file, 10001, 10001)
    token_file.chmod(0o400)
    hook = Receiver()
    db = f"postgresql://evalstop:{password}@host.containers.internal:{pg_port}/postgres"
    env = {"EVALSTOP_DATABASE_URL": db, "EVALSTOP_MIGRATE_ON_START": "false",
           "EVALSTOP_ADMIN_TOKEN_FILE": "/run/secrets/evalstop/admin-token",
           "EVALSTOP_WORKER_POLL_S": "0.05", "EVALSTOP_WORKER_LEASE_S": "3",
           "EVALSTOP_BACKOFF_BASE_S": "0.05", "EVALSTOP_BACKOFF_MAX_S": "0.5",
           "EVALSTOP_ADAPTER_SETTINGS": json.dumps({"webhook": {"url": hook.url, "secret": "s"}})}
    replicas = [Replica(n, env, token_file) for n in ("a", "b")]
    figures: dict[str, Any] = {}
    try:
        # a replica refuses an unmigrated database (and says what to run) ...
        refused = podman("run", "--rm", *RUN_OPTS, *LIMITS, "-e", f"EVALSTOP_DATABASE_URL={db}",
                         "-e", "EVALSTOP_MIGRATE_ON_START=false", IMAGE, check=False, timeout=120)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert "--migrate-only" in refused.stderr
        # ... the migration job runs once ...
        migrate = podman("run", "--rm", *RUN_OPTS, *LIMITS, "-e", f"EVALSTOP_DATABASE_URL={db}",
                         IMAGE, "--migrate-only", timeout=300)
        assert "schema at revision" in migrate.stderr and "alembic" not in migrate.stderr  # one line
        # ... then both replicas start
        figures["cold_start_s"] = [round(r.start(), 1) for r in replicas]
        assert podman("healthcheck", "run", replicas[0].name, check=False).returncode == 0
        for r in replicas:
            assert "alembic.runtime.migration" not in r.logs()  # the replicas only read the revision
        figures.update(_drive(replicas, hook, admin))
        # SIGTERM: drains and exits with status 0 within its grace period
        t_stop = time.monotonic()
        podman("stop", "--time", str(GRACE_S), replicas[0].name, timeout=GRACE_S + 30)
        figures["sigterm_exit_s"] = round(time.monotonic() - t_stop, 1)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", replicas[0].name).stdout.strip()
        assert code == "0", replicas[0].logs()[-3000:]
        assert figures["sigterm_exit_s"] < GRACE_S
        assert "Application shutdown complete" in replicas[0].logs()
    finally:
        for r in replicas:
            podman("rm", "-f", "-v", "--time", "0", r.name, check=False)
        hook.close()
        stop_postgres(pg_ctl, pg_data)
        shutil.rmtree(pg_root, ignore_errors=True)
    figures["test_s"] = round(time.monotonic() - t0, 1)
    print(f"\ncontainer figures: { {k: round(v, 1) for k, v in image.items()} } {figures}")


def _drive(replicas: list[Replica], hook: Receiver, admin: str) -> dict[str, Any]:
    """Register through the API, get a stop delivered, SIGKILL replica b, check every score."""
    a, b = replicas
    op = {"Authorization": f"Bearer {admin}"}
    http = httpx.Client(timeout=15)
    hook_prefix = hook.url.rsplit("/", 1)[0] + "/"
    r = http.post(a.base + "/v1/tenants", headers=op,
                  json={"name": "acme", "scope": {"webhook": {"url_prefixes": [hook_prefix]}}})
    assert r.status_code == 201, r.text
    auth = {"Authorization": f"Bearer {r.json()['token']}"}

    def register(ref: str) -> str:
        body = {"external_ref": ref, "target": "webhook", "detector": "evalstop:k=2", "grace_period_s": 0,
                "target_options": {"url": hook.url}}
        reply = http.post(b.base + "/v1/jobs", headers=auth, json=body)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["id"])

    # 1. a declining curve, scores alternating between the replicas: one stop, delivered once
    job = register("decl-1")
    decisions = []
    for step, value in enumerate(decline(14, 6)):
        reply = http.post(replicas[step % 2].base + f"/v1/jobs/{job}/scores", headers=auth,
                          json={"step": step, "value": value})
        assert reply.status_code == 200, reply.text
        decisions.append(reply.json()["decision"])
        if reply.json()["decision"] == "stop":
            break
    assert decisions[-1] == "stop" and decisions.count("stop") == 1
    delivered_s = wait_until(lambda: http.get(a.base + f"/v1/jobs/{job}", headers=auth).json()["state"]
                             == "stopped", 60, "the stop to be delivered")
    assert len(hook.requests("decl-1", "signal")) == 1, hook.state["log"]
    # 2. a second job's scores to both replicas; b is SIGKILLed halfway; nothing acked is lost
    job2 = register("flat-2")
    acked: dict[int, float] = {}
    for step in range(40):
        value = 0.5 + 0.001 * step  # rising: never stopped
        if step == 20:
            podman("kill", "--signal", "KILL", b.name)
        for target in (replicas[step % 2], a):
            try:
                reply = http.post(target.base + f"/v1/jobs/{job2}/scores", headers=auth,
                                  json={"step": step, "value": value})
            except httpx.HTTPError:
                continue
            if reply.status_code == 200:
                acked[step] = value
                break
    assert podman("inspect", "--format", "{{.State.ExitCode}}", b.name).stdout.strip() == "137"
    stored = http.get(a.base + f"/v1/jobs/{job2}/scores", headers=auth, params={"limit": 1000}).json()
    kept = {int(s["step"]): float(s["value"]) for s in stored}
    assert len(acked) == 40 and all(kept.get(k) == v for k, v in acked.items()), (acked, kept)
    http.close()
    return {"stop_delivered_s": round(delivered_s, 1), "acked_after_kill": len(acked)}
