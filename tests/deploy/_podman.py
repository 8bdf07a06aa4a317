"""Helpers of the container test: podman with runc, the image build, a host PostgreSQL that the
containers reach over podman's bridge, and a webhook receiver on the host."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from service.stop_hook import StopHook  # tests/ is on the path: deploy/ and service/ are its packages

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/evalstop-base:bookworm"
IMAGE = "localhost/evalstop:ci"
#: crun fails on these machines (setrlimit EPERM, then a cgroups hybrid-mode error); runc works
#: once the limits are at most the container's own.
RUN_OPTS = ["--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


def missing_tools() -> str | None:
    """Why the container test cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (rootful podman)"
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup.d/80-container.sh installs it)"
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        return "PostgreSQL server binaries not found (scripts/setup.d/20-service.sh)"
    return None


def podman(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:3])} ... failed ({proc.returncode}): "
                             f"{proc.stderr[-2000:]}")
    return proc


def start_postgres(root: Path, port: int, password: str) -> tuple[Path, str]:
    """A PostgreSQL cluster on ``port`` (every address: podman's bridge appears only with its
    first container), password auth from loopback and the bridge only; returns (pg_ctl, data)."""
    bindir = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1]).parent
    user = "postgres"
    subprocess.run(["id", user], check=True, capture_output=True)
    shutil.chown(root, user)
    pwfile = root / "pw"
    pwfile.write_text(password)
    shutil.chown(pwfile, user)
    data = root / "data"

    def as_pg(*cmd: str) -> None:
        subprocess.run(["runuser", "-u", user, "--", *cmd], check=True, capture_output=True, timeout=120)

    as_pg(str(bindir / "initdb"), "-D", str(data), "-U", "evalstop", "--pwfile", str(pwfile),
          "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8")
    with (data / "pg_hba.conf").open("a") as hba:
        hba.write("host all all 10.88.0.0/16 scram-sha-256\n")
    opts = (f"-p {port} -k {root} -c listen_addresses='*' -c fsync=on "
            "-c max_connections=100")
    as_pg(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start")
    return bindir / "pg_ctl", str(data)


def stop_postgres(pg_ctl: Path, data: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", str(pg_ctl), "-D", data, "-m", "fast", "stop"],
                   capture_output=True, timeout=60)


class Receiver:
    """A webhook receiver on the host, reachable from the containers over the bridge."""

    def __init__(self, handler: type[StopHook] = StopHook) -> None:
        self.state: dict[str, Any] = {"log": [], "stopped": set(), "lock": threading.Lock()}
        self.server = ThreadingHTTPServer(("0.0.0.0", 0), handler)
        self.server.state = self.state  # type: ignore[attr-defined]
        self.url = f"http://host.containers.internal:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def requests(self, ref: str, action: str) -> list[str]:
        with self.state["lock"]:
            return [key for r, a, key in self.state["log"] if r == ref and a == action]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_until(predicate: Any, timeout_s: float, what: str) -> float:
    """Seconds until ``predicate()`` held; AssertionError naming ``what`` after ``timeout_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if predicate():
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
