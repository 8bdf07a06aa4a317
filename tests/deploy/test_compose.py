"""deploy/compose for real: ``stack.sh up`` with podman-compose brings up PostgreSQL, the
migration and two replicas; both answer ``/readyz``, share one database and accept the admin
token written to ``secrets/admin-token``; ``stack.sh down-volumes`` removes everything.

No postgres image can be pulled in CI, so ``POSTGRES_IMAGE`` is a stand-in built from Debian's
postgresql package (``tests/deploy/postgres/``: the official image's POSTGRES_USER, _PASSWORD
and _DB on first start); the compose file is the one users run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from ._podman import BASE_IMAGE, IMAGE, LIMITS, ROOT, RUN_OPTS, podman

pytestmark = pytest.mark.slow
POSTGRES_IMAGE = "localhost/evalstop-ci-postgres:15"
#: podman-compose runs plain `podman run`: runc and the limits come from a containers.conf
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_stack_up_two_replicas_then_down(image: dict[str, float], tmp_path: Path) -> None:
    if shutil.which("podman-compose") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("podman-compose is not installed (scripts/setup.d/80-container.sh)")
        pytest.skip("podman-compose is not installed")
    if podman("image", "exists", POSTGRES_IMAGE, check=False).returncode != 0:
        podman("build", *RUN_OPTS, *LIMITS, "--format", "docker", "--build-arg", f"BASE={BASE_IMAGE}",
               "-t", POSTGRES_IMAGE, str(ROOT / "tests" / "deploy" / "postgres"), timeout=900)
    stack = tmp_path / "evalstop-stack"
    shutil.copytree(ROOT / "deploy" / "compose", stack)
    conf = tmp_path / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    ports = _free_port(), _free_port()
    env = {**os.environ, "CONTAINERS_CONF": str(conf), "SERVICE_IMAGE": IMAGE,
           "POSTGRES_IMAGE": POSTGRES_IMAGE, "PORT_A": str(ports[0]), "PORT_B": str(ports[1])}
    env.pop("COMPOSE", None)

    def stack_sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(stack / "stack.sh"), *args], env=env, capture_output=True,
                              text=True, timeout=600)

    t0 = time.monotonic()
    try:
        up = stack_sh("up")
        up_s = time.monotonic() - t0
        assert up.returncode == 0, (up.stdout + up.stderr)[-3000:]
        assert all(f"127.0.0.1:{p} is ready" in up.stdout for p in ports)
        assert (stack / ".env").stat().st_mode & 0o077 == 0  # the database password: owner only
        token = (stack / "secrets" / "admin-token").read_text().strip()
        op = {"Authorization": f"Bearer {token}"}
        a, b = (f"http://127.0.0.1:{p}" for p in ports)
        created = httpx.post(a + "/v1/tenants", headers=op, json={"name": "acme"}, timeout=10)
        assert created.status_code == 201, created.text
        listed = httpx.get(b + "/v1/tenants", headers=op, timeout=10).json()
        assert [t["name"] for t in listed] == ["acme"]  # one database behind both replicas
        wrong = httpx.get(b + "/v1/tenants", headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401
        migrate = podman("ps", "-a", "--filter", f"label=io.podman.compose.project={stack.name}",
                         "--filter", "name=migrate", "--format", "{{.Status}}").stdout
        assert "Exited (0)" in migrate, migrate
    finally:
        down = stack_sh("down-volumes")
    assert down.returncode == 0, (down.stdout + down.stderr)[-3000:]
    left = podman("ps", "-a", "--filter", f"label=io.podman.compose.project={stack.name}", "--format",
                  "{{.Names}}").stdout.split()
    assert left == []
    total_s = time.monotonic() - t0
    print(f"\ncompose: stack.sh up {up_s:.1f} s (both replicas ready), whole test {total_s:.1f} s")
