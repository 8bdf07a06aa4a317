"""The load benchmark runs end to end (tiny and short here; the real figures come from
``python bench/service_load.py``)."""

from __future__ import annotations

import json
import re
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
    result = json.loads(_floor("--json"))
    paced = result["paced"]
    assert paced["requests"] == 40 and 0 < paced["p50_ms"] <= paced["p99_ms"] <= paced["max_ms"]
    assert paced["server_cpu_ms_per_request"] > 0 and paced["database_cpu_ms_per_request"] > 0
    assert result["paced_warm_up"]["requests"] == 20
    assert len(paced["p99_ms_by_second"]) == 1 and paced["p99_ms_by_second"][0] <= paced["max_ms"]


@pytest.mark.skipif(not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")),
                    reason="PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
def test_service_floor_bench_pairs_the_floor_with_the_service() -> None:
    out = _floor("--pairs", "1", "--target-ms", "10000", "--phase-log")
    first, pair, floor_tail, service_tail, met, p99_ratio, ratio = out.splitlines()
    assert first.startswith("paced 40/s single scores, 1 replica(s): floor, then service, 1 times")
    assert re.match(r"  1 \(ended \d\d:\d\d:\d\d UTC, load [\d.]+\): floor \d+/s .*   service \d+/s", pair)
    # the phase split of each side's slowest requests (at least 20 kept: all 40 of a run here)
    assert floor_tail.startswith("     floor tail: slowest 1 of 40: median") and "database" in floor_tail
    assert service_tail.startswith("     service tail: slowest 1 of 40: median") and "admit" in service_tail
    assert re.fullmatch(r"p99 service / floor: median [\d.]+, max [\d.]+", p99_ratio)
    # (whether each kept the whole rate, 99 %, depends on this machine's moment: not asserted)
    assert re.fullmatch(r"within p99 <= 10000 ms at the whole rate: floor [01] of 1, service [01] of 1", met)
    server, database = (float(x.rstrip(",")) for x in ratio.split()[-3::2])
    assert server > 0 and database > 0


def _floor(*extra: str) -> str:
    cmd = [sys.executable, str(ROOT / "bench" / "service_floor.py"), "--replicas", "1", "--rate", "40",
           "--seconds", "1", "--warm-up", "0.5", "--paced-threads", "2", "--threads", "2", *extra]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout


@pytest.mark.skipif(not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")),
                    reason="PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
def test_service_load_bench_times_a_new_tenants_first_concurrent_requests() -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "service_load.py"), "--db", "postgresql", "--replicas", "2",
           "--phases", "first-burst", "--burst-rounds", "2", "--burst-size", "4", "--burst-steady", "3",
           "--phase-log", "--json"]
    burst = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout)[
        "first_burst"]
    assert (burst["rounds"], burst["size"], burst["servers"]) == (2, 4, 1)
    assert 0 < burst["first_p50_ms"] <= burst["first_p99_ms"] <= burst["first_max_ms"]
    assert burst["ratio_first_p99_to_steady_p50"] == round(burst["first_p99_ms"] / burst["steady_p50_ms"], 2)
    split = burst["phase_split"]  # 8 first + 24 steady requests on the second server, 30+ job posts not
    assert split["requests"] == 32 and split["slowest"] == 1
