"""The Ray path of the sweep runner, for real: a private local Ray head started by the test
(token authentication on, its temp dir and HOME under the test's tmp dir), then
``evalstop reproduce --study ... --ray-address`` in a subprocess, compared with the local pool.

The head is stopped by signalling its ``ray start --block`` process and killing, by pid, what
still names its temp dir; never ``ray stop``, which would also stop other people's Ray.
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
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray path needs the ray extra: pip install -e '.[ray]'")

from evalstop.testbed.cluster import pids_naming, ray_ports

pytestmark = pytest.mark.slow
RAY = Path(sys.executable).with_name("ray")
EVALSTOP = [sys.executable, "-m", "evalstop.cli"]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    root = Path(tmp_path_factory.mktemp("rayhead", numbered=True))
    (root / "home").mkdir()
    temp_dir = root / "ray"  # short: Ray's unix socket paths have a length limit
    env = {**os.environ, "HOME": str(root / "home"), "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(16), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    gcs, _, nm, om, client, agent, agent_grpc, metrics, rt_env, workers = ray_ports()  # no dashboard
    cmd = [str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
           "--include-dashboard=false", f"--node-manager-port={nm}", f"--object-manager-port={om}",
           f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
           f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
           f"--runtime-env-agent-port={rt_env}", f"--min-worker-port={workers}",
           f"--max-worker-port={workers + 40}", "--num-cpus=2", f"--temp-dir={temp_dir}",
           "--disable-usage-stats"]
    log = open(root / "ray-start.log", "wb")  # noqa: SIM115 - lives as long as the head
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_port(gcs, proc, root / "ray-start.log")
        yield f"127.0.0.1:{gcs}", env
    finally:
        _stop(proc, str(temp_dir))
        log.close()


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"ray start exited: {log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                time.sleep(2.0)  # the GCS listens before the raylet has registered
                return
        time.sleep(0.5)
    pytest.fail(f"Ray head not listening after {timeout_s} s: {log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes], temp_dir: str) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 5
    while pids_naming(temp_dir) and time.monotonic() < deadline:
        time.sleep(0.25)
    for pid in pids_naming(temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _reproduce(out: Path, env: dict[str, str], *extra: str) -> dict:
    cmd = [*EVALSTOP, "reproduce", "--study", "k", "--seeds", "2", "--out", str(out), "--no-report", *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "study-k" / "results.json").read_text())  # --study: its own folder


def _rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "study-k" / "rows.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["point"], r["seed"], r["policy"]))


def test_sweep_on_ray_matches_the_local_pool(ray_head: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    address, env = ray_head
    on_ray = _reproduce(tmp_path / "ray", env, "--ray-address", address)
    assert on_ray["backend"] == "ray"
    assert on_ray["tasks"] == {"cached": 0, "ran": 12}  # 6 values of k x 2 seeds
    local_env = {k: v for k, v in env.items() if not k.startswith("RAY_")}
    local = _reproduce(tmp_path / "local", local_env, "--workers", "2")
    assert local["backend"].startswith("process pool")
    assert _rows(tmp_path / "ray") == _rows(tmp_path / "local")  # same code, same seeds, same rows


def test_ray_address_from_the_environment_and_cache_reuse(ray_head: tuple[str, dict[str, str]],
                                                          tmp_path: Path) -> None:
    address, env = ray_head
    first = _reproduce(tmp_path / "out", {**env, "RAY_ADDRESS": address})
    assert first["backend"] == "ray" and first["tasks"]["ran"] == 12
    again = _reproduce(tmp_path / "out", {**env, "RAY_ADDRESS": address})
    assert again["tasks"] == {"cached": 12, "ran": 0}  # nothing sent to the cluster


def test_wrong_token_fails_loudly(ray_head: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    address, env = ray_head
    bad = {**env, "RAY_AUTH_TOKEN": "not-the-token"}
    cmd = [*EVALSTOP, "reproduce", "--study", "k", "--seeds", "2", "--out", str(tmp_path), "--no-report",
           "--no-cache", "--ray-address", address]
    done = subprocess.run(cmd, env=bad, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0
    assert not (tmp_path / "study-k" / "results.json").exists()
