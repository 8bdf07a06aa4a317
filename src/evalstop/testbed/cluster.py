"""The testbed's processes: an ``evalstop serve``, and what the private Ray head is made of.

(The Ray head itself is started by :mod:`.ray_head`, the private Slurm by :mod:`.slurm_cluster`;
both engines are driven through :mod:`.engine`.)

Both bind to 127.0.0.1 on free ports, keep their state under the run directory, and are
stopped by pid: the Ray head by signalling its ``ray start --block`` process and then killing
what still names its temp dir (never ``ray stop``, which would stop other people's Ray).
Slots are a custom resource ``slot``, so that a 2-core machine can declare 2 slots whatever
Ray thinks the CPU count is; on a GPU cluster a slot is a GPU (docs/testbed.md).
:func:`connect_ray` uses an existing cluster instead (``--ray-address``): nothing is started
there, and nothing of it is stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SLOT = "slot"


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@dataclass
class Proc:
    """A started process, its log, and what identifies its children (for cleanup by pid)."""

    proc: subprocess.Popen[bytes] | None  # None: not ours (an existing cluster)
    log: Path
    marker: str = ""
    info: dict[str, str] = field(default_factory=dict)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def ray_ports(n_workers: int = 40) -> list[int]:
    """Nine free ports and the first of ``n_workers + 1`` worker ports, none of the nine inside
    the worker range (Ray refuses to start on such an overlap)."""
    while True:
        ports = free_ports(10)
        if not any(ports[-1] <= p <= ports[-1] + n_workers for p in ports[:-1]):
            return ports


def start_service(root: Path, adapter_settings: dict[str, Any], *, timeout_s: float = 60.0) -> Proc:
    """``evalstop serve`` on SQLite with ``adapter_settings`` (the engine's: the Ray adapter
    pointed at the head, or the Slurm adapter at the private ``slurm.conf``); admin token in info."""
    import httpx

    (port,) = free_ports(1)
    admin = secrets.token_hex(16)
    env = {
        **os.environ,
        "EVALSTOP_ADMIN_TOKEN": admin,
        "EVALSTOP_ADAPTER_SETTINGS": json.dumps(adapter_settings),
    }
    cmd = [
        sys.executable,
        "-m",
        "evalstop.cli",
        "serve",
        f"--database-url=sqlite:///{root / 'evalstop.db'}",
        "--host=127.0.0.1",
        f"--port={port}",
        "--log-level=warning",
    ]
    proc = spawn(cmd, env, root / "serve.log")
    server = Proc(
        proc,
        root / "serve.log",
        info={"url": f"http://127.0.0.1:{port}", "admin": admin},
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"evalstop serve exited: {server.tail()}")
        with contextlib.suppress(httpx.HTTPError):
            if (
                httpx.get(
                    f"{server.info['url']}/v1/tenants",
                    timeout=2,
                    headers={"Authorization": f"Bearer {admin}"},
                ).status_code
                == 200
            ):
                return server
        time.sleep(0.3)
    stop(server)
    raise RuntimeError(f"evalstop serve not ready after {timeout_s} s: {server.tail()}")


def connect_ray(address: str, slots: int, *, timeout_s: float = 30.0) -> Proc:
    """An existing Ray cluster's Jobs API (the dashboard, ``HOST:PORT`` or ``http(s)://HOST:PORT``)
    for ``slots`` slots of its ``slot`` resource; the token, if the cluster wants one, from
    ``RAY_AUTH_TOKEN``. Checks that the API answers; the cluster must declare the ``slot`` resource
    (``ray start --resources='{"slot": N}'``), or jobs stay pending until the arm times out."""
    import httpx

    base = (address if "://" in address else f"http://{address}").rstrip("/")
    token = os.environ.get("RAY_AUTH_TOKEN", "")
    client = api(base, token)
    try:
        r = client.get("/api/jobs/", timeout=timeout_s)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        raise RuntimeError(f"--ray-address {address!r}: the Ray Jobs API does not answer: {exc}") from exc
    finally:
        client.close()
    return Proc(None, Path(os.devnull), "", {"address": base, "token": token, "slots": str(slots)})


def stop(p: Proc, timeout_s: float = 20.0) -> None:
    if p.proc is None:
        return
    if p.proc.poll() is None:
        p.proc.send_signal(signal.SIGTERM)
        try:
            p.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()
    if not p.marker:
        return
    deadline = time.monotonic() + 5
    while pids_naming(p.marker) and time.monotonic() < deadline:
        time.sleep(0.25)
    for pid in pids_naming(p.marker):  # stragglers of this head only, by pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def pids_naming(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def api(base: str, token: str) -> Any:
    """An httpx client for ``base`` with a bearer token."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base, timeout=30, headers=headers)
