"""deploy/compose for real, with podman-compose 1.0.3 (what Debian 12 ships), as an operator runs it:

- ``stack.sh up`` brings up PostgreSQL, the migration and two replicas that share the database
  and take the admin token from ``secrets/admin-token``; nothing it prints holds the generated
  PostgreSQL password or the admin token;
- adapter settings come from ``secrets/adapter-settings.json``: a webhook job is "not
  configured" until the file names the webhook, then ``stack.sh restart`` applies it;
- ``stack.sh rotate-admin-token`` restarts the replicas one at a time and leaves PostgreSQL alone;
- ``SERVICE_IMAGE=<new> stack.sh up`` runs the new image's migration, then replaces the replicas
  one at a time: both then run the new image and report its version;
- ``stack.sh stop`` with a webhook call in flight (a receiver that takes 12 s) lets the replica
  drain past podman's 10 s default and exit 0; ``stack.sh down`` removes the
  containers and the network and keeps the database volume; ``stack.sh down-volumes`` removes it.

No postgres image can be pulled in CI, so ``POSTGRES_IMAGE`` is a stand-in built from Debian's
postgresql package (``tests/deploy/postgres/``: the official image's POSTGRES_USER, _PASSWORD
and _DB on first start); the compose file is the one users run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from service.stop_hook import StopHook  # tests/ is on the path

from ._podman import BASE_IMAGE, IMAGE, LIMITS, ROOT, RUN_OPTS, Receiver, podman, wait_until
from .test_container import decline

pytestmark = pytest.mark.slow
POSTGRES_IMAGE = "localhost/evalstop-ci-postgres:15"
UPGRADE_IMAGE = "localhost/evalstop:ci-upgrade"
UPGRADE_VERSION = "0.1.0.post9"
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


def _images(scratch: Path) -> None:
    if podman("image", "exists", POSTGRES_IMAGE, check=False).returncode != 0:
        podman("build", *RUN_OPTS, *LIMITS, "--format", "docker", "--build-arg", f"BASE={BASE_IMAGE}",
               "-t", POSTGRES_IMAGE, str(ROOT / "tests" / "deploy" / "postgres"), timeout=900)
    # the "next release": the same image whose installed metadata says another version
    scratch.mkdir()
    (scratch / "Containerfile").write_text(
        f"FROM {IMAGE}\nUSER 0\nRUN sed -i 's/^Version: .*/Version: {UPGRADE_VERSION}/' "
        "/opt/evalstop/lib/python3*/site-packages/evalstop-*.dist-info/METADATA\nUSER 10001:10001\n")
    podman("build", *RUN_OPTS, *LIMITS, "--format", "docker", "-t", UPGRADE_IMAGE, str(scratch), timeout=600)


#: Seconds the slow receiver holds each request: past podman's default stop timeout (10 s)
SLOW_S = 12.0


class SlowHook(StopHook):
    """A receiver whose every answer takes SLOW_S: an adapter call in flight at a stop."""

    def do_POST(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        with state["lock"]:
            state["arrived"] = state.get("arrived", 0) + 1
        time.sleep(SLOW_S)
        super().do_POST()


class Availability:
    """Polls both replicas' /readyz in a thread; ``gaps`` counts the polls where neither was ready."""

    def __init__(self, urls: list[str]) -> None:
        self.urls, self.polls, self.gaps = urls, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ready(self, client: httpx.Client, url: str) -> bool:
        try:
            return client.get(url + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def _run(self) -> None:
        with httpx.Client() as client:
            while not self._stop.is_set():
                self.polls += 1
                self.gaps += not any(self._ready(client, url) for url in self.urls)
                time.sleep(0.2)

    def __enter__(self) -> Availability:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class Stack:
    """A copy of deploy/compose under its own project name and ports."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "stack"
        shutil.copytree(ROOT / "deploy" / "compose", self.dir)
        conf = tmp_path / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        self.project = f"evalstop-ci-{secrets.token_hex(3)}"
        self.ports = _free_port(), _free_port()
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf), "SERVICE_IMAGE": IMAGE,
                    "POSTGRES_IMAGE": POSTGRES_IMAGE, "PORT_A": str(self.ports[0]),
                    "PORT_B": str(self.ports[1]), "COMPOSE_PROJECT_NAME": self.project}
        self.env.pop("COMPOSE", None)
        self.printed = ""

    def sh(self, *args: str, **env: str) -> str:
        proc = subprocess.run(["bash", str(self.dir / "stack.sh"), *args], env={**self.env, **env},
                              capture_output=True, text=True, timeout=900)
        self.printed += proc.stdout + proc.stderr
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        return proc.stdout

    def url(self, replica: int) -> str:
        return f"http://127.0.0.1:{self.ports[replica]}"

    def container(self, service: str) -> str:
        [cid] = podman("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                       "--filter", f"label=com.docker.compose.service={service}").stdout.split()
        return cid

    def state(self, service: str) -> dict[str, str]:
        fields = {"started": ".State.StartedAt", "finished": ".State.FinishedAt", "image": ".Image",
                  "status": ".State.Status", "code": ".State.ExitCode"}
        fmt = json.dumps({k: "{{" + v + "}}" for k, v in fields.items()})
        return dict(json.loads(podman("inspect", "--format", fmt, self.container(service)).stdout))

    def left(self) -> list[str]:
        label = f"label=com.docker.compose.project={self.project}"
        return (podman("ps", "-a", "-q", "--filter", label).stdout.split()
                + podman("network", "ls", "-q", "--filter", label).stdout.split()
                + podman("volume", "ls", "-q", "--filter", label).stdout.split())


def _rolled_one_at_a_time(before: dict[str, dict[str, str]], after: Callable[[str], dict[str, str]]) -> None:
    a, b, pg = after("replica-a"), after("replica-b"), after("postgres")
    assert a["started"] != before["replica-a"]["started"] and b["started"] != before["replica-b"]["started"]
    assert a["started"] < b["finished"]  # b was stopped only after a had started again
    assert pg["started"] == before["postgres"]["started"]  # PostgreSQL untouched


def test_stack_up_configure_rotate_upgrade_stop_down(image: dict[str, float], tmp_path: Path) -> None:
    if shutil.which("podman-compose") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("podman-compose is not installed (scripts/setup.d/80-container.sh)")
        pytest.skip("podman-compose is not installed")
    _images(tmp_path / "upgrade")
    stack = Stack(tmp_path)
    both = [stack.url(0), stack.url(1)]
    figures: dict[str, float] = {}
    http = httpx.Client(timeout=15)
    receiver = Receiver(SlowHook)
    t0 = time.monotonic()
    try:
        out = stack.sh("up")
        figures["up_s"] = time.monotonic() - t0
        assert all(f"127.0.0.1:{p} is ready" in out for p in stack.ports), out
        assert (stack.dir / ".env").stat().st_mode & 0o077 == 0  # the database password: owner only
        assert (stack.dir / "secrets").stat().st_mode & 0o077 == 0
        token = (stack.dir / "secrets" / "admin-token").read_text().strip()
        op = {"Authorization": f"Bearer {token}"}
        hook = receiver.url.rsplit("/", 1)[0]
        created = http.post(stack.url(0) + "/v1/tenants", headers=op,
                            json={"name": "acme", "scope": {"webhook": {"url_prefixes": [hook + "/"]}}})
        assert created.status_code == 201, created.text
        tenant = {"Authorization": f"Bearer {created.json()['token']}"}
        assert [t["name"] for t in http.get(stack.url(1) + "/v1/tenants", headers=op).json()] == ["acme"]
        wrong = http.get(stack.url(1) + "/v1/tenants", headers={"Authorization": "Bearer no"})
        assert wrong.status_code == 401
        assert stack.state("migrate")["code"] == "0"

        def register(ref: str) -> httpx.Response:
            return http.post(stack.url(1) + "/v1/jobs", headers=tenant, json={
                "external_ref": ref, "target": "webhook", "detector": "evalstop:k=2",
                "target_options": {"url": hook + "/" + ref}})

        refused = register("j1")
        assert refused.status_code == 422 and "'webhook' is not configured" in refused.text, refused.text
        # adapter settings (a webhook secret) from the secrets file, applied by a rolling restart
        (stack.dir / "secrets" / "adapter-settings.json").write_text(
            json.dumps({"webhook": {"url": receiver.url, "secret": "whsec-" + secrets.token_hex(8),
                                    "timeout_s": 30}}))
        before = {s: stack.state(s) for s in ("replica-a", "replica-b", "postgres")}
        with Availability(both) as restart:
            stack.sh("restart")
        assert restart.polls > 5 and restart.gaps == 0  # never both replicas down at once
        _rolled_one_at_a_time(before, stack.state)
        assert register("j1").status_code == 201
        # token rotation: the replicas one at a time, PostgreSQL untouched
        before = {s: stack.state(s) for s in ("replica-a", "replica-b", "postgres")}
        t_rotate = time.monotonic()
        with Availability(both) as rotate:
            stack.sh("rotate-admin-token")
        assert rotate.gaps == 0
        figures["rotate_s"] = time.monotonic() - t_rotate
        _rolled_one_at_a_time(before, stack.state)
        new_token = (stack.dir / "secrets" / "admin-token").read_text().strip()
        assert new_token != token
        for replica in (0, 1):
            assert http.get(stack.url(replica) + "/v1/tenants", headers=op).status_code == 401
            assert http.get(stack.url(replica) + "/v1/tenants",
                            headers={"Authorization": f"Bearer {new_token}"}).status_code == 200
        # upgrade: the new image's migration, then the replicas one at a time
        before = {s: stack.state(s) for s in ("replica-a", "replica-b", "postgres")}
        t_upgrade = time.monotonic()
        with Availability(both) as upgrade:
            out = stack.sh("up", SERVICE_IMAGE=UPGRADE_IMAGE)
        assert upgrade.gaps == 0
        figures["upgrade_s"] = time.monotonic() - t_upgrade
        assert "upgrading to" in out and "migration done" in out, out
        new_id = podman("image", "inspect", "--format", "{{.Id}}", UPGRADE_IMAGE).stdout.strip()
        for service in ("migrate", "replica-a", "replica-b"):
            assert stack.state(service)["image"] == new_id, service  # the new migration ran, exit 0:
        assert stack.state("migrate")["code"] == "0"
        for service in ("replica-a", "replica-b"):
            version = podman("exec", stack.container(service), "evalstop", "--version").stdout
            assert version.strip() == f"evalstop {UPGRADE_VERSION}", (service, version)
        assert stack.state("postgres")["started"] == before["postgres"]["started"]
        listed = http.get(stack.url(0) + "/v1/tenants", headers={"Authorization": f"Bearer {new_token}"})
        assert [t["name"] for t in listed.json()] == ["acme"]  # the data survived the upgrade
        # stop with a webhook call in flight: the replica drains past podman's default 10 s
        # (the worker waits up to 10 s for the call) and exits 0, not 137 after `-t 10`
        job = register("j2").json()["id"]
        for step, value in enumerate(decline(14, 6)):
            reply = http.post(stack.url(0) + f"/v1/jobs/{job}/scores", headers=tenant,
                              json={"step": step, "value": value})
            if reply.json()["decision"] == "stop":
                break
        wait_until(lambda: receiver.state.get("arrived", 0) > 0, 60, "the stop's webhook call to start")
        t_stop = time.monotonic()
        stack.sh("stop")
        figures["stop_s"] = time.monotonic() - t_stop
        for service in ("replica-a", "replica-b"):
            assert stack.state(service)["code"] == "0", service
        assert figures["stop_s"] > 10
        assert "stop -t 30" in (stack.dir / ".stack.log").read_text()
        # down: the containers and the network go, the database volume stays
        stack.sh("down")
        label = f"label=com.docker.compose.project={stack.project}"
        assert podman("volume", "ls", "-q", "--filter", label).stdout.split() == stack.left() != []
    finally:
        http.close()
        stack.sh("down-volumes")
        receiver.close()
    assert stack.left() == []  # containers, the network and the database volume
    for secret in ((stack.dir / ".env").read_text().split("=", 1)[1].strip(), token, new_token):
        assert secret not in stack.printed  # stack.sh never prints a secret
        assert secret not in (stack.dir / ".stack.log").read_text()
    figures["test_s"] = time.monotonic() - t0
    print(f"\ncompose: { {k: round(v, 1) for k, v in figures.items()} }")
