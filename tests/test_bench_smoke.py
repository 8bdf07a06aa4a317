"""``bench/sim_speed.py`` runs end to end on tiny sizes and reports what it simulated.

A smoke test, not a timing test: the benchmark itself is run by hand (see bench/README.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalstop.schedulers import SRTFEst
from evalstop.sim.cluster import simulate
from evalstop.workloads import PRESETS, generate

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "sim_speed.py"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_table_has_one_row_per_size_and_policy_and_the_scaling_exponents() -> None:
    done = bench("--sizes", "300x64,600x64")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["size", "policy", "generate_s", "simulate_s"]
    rows = [line.split()[:2] for line in lines[1:5]]
    assert rows == [
        ["300x64", "srtf"], ["300x64", "evalstop(srtf)"], ["600x64", "srtf"], ["600x64", "evalstop(srtf)"]
    ]
    for line in lines[1:5]:
        numbers = [float(cell) for cell in line.split()[2:]]
        assert len(numbers) == 6 and min(numbers) >= 0 and numbers[3] > 0  # jobs/s
    exponents = [line for line in lines if "300 -> 600" in line]
    assert len(exponents) == 2 and all("simulate" in line for line in exponents)


def test_the_json_record_is_of_the_workload_it_names() -> None:
    done = bench("--sizes", "300x64", "--policies", "srtf", "--seed", "3", "--json")
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)["records"]
    workload = generate(PRESETS["paper"].with_(n_jobs=300, total_gpus=64), 3)
    assert record["event_log_hash"] == simulate(workload, SRTFEst()).event_log_hash
    assert record["jobs_per_s"] == 300 / record["simulate_s"]
    assert record["peak_rss_mib"] >= record["peak_rss_gen_mib"] > 0


def test_a_malformed_size_is_rejected_naming_it() -> None:
    done = bench("--sizes", "300by64")
    assert done.returncode == 2
    assert "'300by64'" in done.stderr


def test_the_sections_report_ratios_exponents_and_matching_schedules() -> None:
    done = bench("--quick", "--json", "--sections", "queue,overload")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [(r["policy"], r["backfill"]) for r in out["queue"]] == [
        ("fifo", False), ("fifo", True), ("sjf", False), ("sjf", True)
    ]
    assert all(r["starts_match"] and r["queued"] > 0 and r["ratio"] > 0 for r in out["queue"])
    assert sorted((r["load"], r["policy"]) for r in out["overload"]) == [
        (1.2, "las"), (1.2, "srtf"), (1.5, "las"), (1.5, "srtf")
    ]
    assert all(r["n_preemptions"] > 0 and r["from_jobs"] < r["n_jobs"] for r in out["overload"])


def test_detector_cost_reports_every_requested_rule_at_every_history() -> None:
    script = SCRIPT.parent / "detector_cost.py"
    done = subprocess.run(
        [sys.executable, str(script), "--histories", "10,300", "--rule", "evalstop", "--rule", "cusum",
         "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["rule"] for r in rows] == ["evalstop", "cusum"]
    for r in rows:
        assert set(r["us_per_eval"]) == {"10", "300"} and all(v > 0 for v in r["us_per_eval"].values())
        assert r["ratio"] > 0 and r["state_json_bytes"] > 0


def test_the_million_section_times_the_lean_loop_on_its_trace() -> None:
    done = bench("--quick", "--json", "--sections", "million")
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)["million"]
    assert r["n_jobs"] == 20000 and r["lean_cpu_s"] > 0 and 0 <= r["n_queued"] <= r["n_jobs"]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (callgrind)")
def test_the_instruction_count_is_of_the_run_it_names() -> None:
    from evalstop.detectors import KDeclines
    from evalstop.schedulers import EvalStop

    script = SCRIPT.parent / "sim_instructions.py"
    done = subprocess.run([sys.executable, str(script), "--jobs", "500", "--seed", "2"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    count = re.search(r"([\d,]+) instructions, ([\d,]+) a job; event-log hash (\w+)", done.stdout)
    assert count is not None, done.stdout
    workload = generate(PRESETS["paper"].with_(n_jobs=500, total_gpus=8), 2)
    want = simulate(workload, EvalStop(SRTFEst(), KDeclines(against="best"))).event_log_hash
    assert want.startswith(count.group(3))
    assert int(count.group(1).replace(",", "")) > 500 * 1000  # at least a thousand a job


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (callgrind)")
def test_the_generator_instruction_count_names_both_parts() -> None:
    script = SCRIPT.parent / "sim_instructions.py"
    done = subprocess.run([sys.executable, str(script), "--generate", "--jobs", "500"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    line = r"^(generate|loss), 500 jobs \(paper preset\): ([\d,]+) instructions"
    counts = re.findall(line, done.stdout, re.M)
    assert [part for part, _ in counts] == ["generate", "loss"], done.stdout
    assert all(int(n.replace(",", "")) > 500 * 10 for _, n in counts)  # counted, not zero
