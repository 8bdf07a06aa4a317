"""The load benchmark runs end to end (tiny and short here; the real figures come from
``python bench/service_load.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("client", ["raw", "http.client"])
def test_service_load_bench_reports_its_figures(client: str) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "service_load.py"), "--phases", "batched,paced",
           "--seconds", "1", "--jobs", "4", "--client", client,
           "--clients", "2", "--batch", "50", "--rate", "40", "--paced-threads", "2", "--warm-up", "0.5",
           "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=180).stdout
    result = json.loads(out)
    assert result["synchronous"] == "FULL" and result["client"] == client
    assert result["batched"]["scores"] > 0 and result["batched"]["scores_per_s"] > 0
    paced = result["paced"]
    assert paced["requests"] == 40 and 0 < paced["p50_ms"] <= paced["p99_ms"] <= paced["max_ms"]
    assert 0 <= paced["server_kernel_ms_per_request"] <= paced["server_cpu_ms_per_request"]
    assert result["paced_warm_up"]["requests"] == 20  # on other jobs, apart from the measured phase


def test_service_load_bench_reports_an_idle_servers_cpu() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "service_load.py"), "--phases", "idle", "--seconds", "1",
           "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=180).stdout
    idle = json.loads(out)["idle"]
    assert idle["seconds"] >= 1.0 and idle["database_cpu_ms_per_s"] is None  # SQLite: no database process
    [server] = idle["server_cpu_ms_per_s"]
    assert server is not None and server >= 0


def test_fast_path_bench_compares_the_two_lanes() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "fastpath_cost.py"), "--blocks", "2", "--block", "20",
           "--json"]
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=180).stdout)
    cpu = result["cpu_ms_per_request"]
    assert set(cpu) == {"fast path", "route"} and min(cpu.values()) > 0
    assert abs(result["ratio_route_over_fast_path"] - cpu["route"] / cpu["fast path"]) < 0.01


def test_ingest_profile_bench_reports_cpu_and_calls_per_score() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "ingest_profile.py"), "--db", "sqlite", "-n", "20",
           "--blocks", "2", "--profile", "--no-group-commit"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=180).stdout
    head, calls = out.splitlines()[:2]
    assert head.startswith("sqlite: 20 single-score ingests in 2 blocks:") and "in the kernel" in head
    assert calls.endswith("Python function calls per score") and int(calls.split()[0]) > 0


@pytest.mark.skipif(not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")),
                    reason="PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
def test_service_floor_bench_reports_the_paced_figures() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "service_floor.py"), "--replicas", "1", "--rate", "40",
           "--seconds", "1", "--warm-up", "0.5", "--paced-threads", "2", "--threads", "2", "--json"]
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=180).stdout)
    paced = result["paced"]
    assert paced["requests"] == 40 and 0 < paced["p50_ms"] <= paced["p99_ms"] <= paced["max_ms"]
    assert paced["server_cpu_ms_per_request"] > 0 and paced["database_cpu_ms_per_request"] > 0
    assert result["paced_warm_up"]["requests"] == 20
