"""The live testbed on Slurm: a private single-node Slurm (munged, slurmctld, slurmd) with 2 CPU
slots per arm (both arms at once), a real ``evalstop serve`` whose Slurm adapter points at it,
and 6 real training jobs (hacking and healthy RL runs, supervised fine-tuning; one or two slots
wide) submitted with ``sbatch``, each reporting its eval to the service in remote mode. Both
arms run over the same trace; Slurm gives each job as many CPUs as it is wide.

Asserted on the enforced arm: every hacking job (labelled from its gold curve in the shadow arm)
was stopped by the service through the Slurm adapter: Slurm's record of the job carries the
adapter's pin comment naming the best checkpoint, the training process got the adapter's
SIGTERM (``scancel --signal=TERM``) and ended early (a job that exits 0 on SIGTERM is COMPLETED
in Slurm: the comment is what tells it from a job that ran to its end); its slot went to a job
that was queued; the delivered checkpoint is the best one and exists, pinned.

Needs root and Debian's slurm-wlm and munge (``scripts/setup.d/25-enforce.sh`` installs them in
CI); skipped, saying which, where they are absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the testbed needs the service extra: pip install -e '.[service]'")

from evalstop.testbed import WorkloadSpec
from evalstop.testbed.cluster import pids_naming
from evalstop.testbed.run import run_testbed
from evalstop.testbed.slurm_cluster import missing
from evalstop.testbed.summary import stop_decision
from testbed_checks import (
    by_name,
    check_delivered_checkpoint_is_the_best,
    check_enforced_curves_are_prefixes,
    check_freed_slots_go_to_queued_jobs,
)

pytestmark = pytest.mark.slow
SLOTS = 2  # per arm
SPEC = WorkloadSpec(n_jobs=6, seed=3, mean_interarrival_s=1.0, step_time_s=0.04, sft_share=0.2, max_slots=2)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("testbed-slurm")
    summary = run_testbed(SPEC, SLOTS, out, engine="slurm", timeout_s=240)
    raw = json.loads((out / "raw.json").read_text())
    return out, summary, raw


def test_the_trace_mixes_all_three_kinds(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, summary, raw = run
    assert {r["kind"] for r in raw["shadow"]} == {"hack", "healthy", "sft"}
    assert all(r["engine"] == "slurm" and r["ref"].isdigit() for arm in raw.values() for r in arm)
    assert {r["slots"] for r in raw["shadow"]} == {1, 2}
    assert all(r["engine_slots"] == r["slots"] for arm in raw.values() for r in arm)  # CPUs = width
    for arm in ("shadow", "enforced"):  # never more slots busy than the arm has
        jobs = summary["jobs"][arm]
        for j in jobs:
            busy = sum(k["slots"] for k in jobs if k["dispatch_s"] <= j["dispatch_s"] < k["end_s"])
            assert busy <= SLOTS, (arm, j["name"], busy)
    labels = {j["name"]: j["label"] for j in summary["jobs"]["shadow"]}
    assert all(labels[r["name"]] == "healthy" for r in raw["shadow"] if r["kind"] == "sft")


def test_every_hacking_job_is_stopped_through_slurm(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, summary, raw = run
    enforced, records = by_name(summary["jobs"]["enforced"]), by_name(raw["enforced"])
    hacking = [n for n, j in enforced.items() if j["label"] == "hacking"]
    assert hacking, "the trace must contain hacking jobs"
    for name in hacking:
        job, record = enforced[name], records[name]
        decision = stop_decision(record)
        assert job["enforced_stop"] and decision is not None, f"{name}: the service never decided to stop it"
        assert record["engine_comment"] == f"evalstop-pin:{decision['best_checkpoint_uri']}", record
        assert record["sigterm"], f"{name}: the training process never got SIGTERM"
        # It exits 0 on the adapter's SIGTERM (COMPLETED); one that outlived the grace period
        # would have met the adapter's scancel (CANCELLED).
        assert record["engine_status"] in ("COMPLETED", "CANCELLED"), record["engine_status"]
        assert record["service"]["state"] == "stopped"
        assert len(record["evals"]) < SPEC.n_evals  # it did not run to the end
    for name, job in enforced.items():  # nothing else was touched
        if not job["decided_stop"]:
            assert records[name]["engine_status"] == "COMPLETED" and not records[name]["sigterm"]
            assert not records[name]["engine_comment"].startswith("evalstop-pin:")
    for record in raw["shadow"]:  # shadow: decisions logged, never enacted
        assert record["engine_status"] == "COMPLETED" and not record["sigterm"]
        assert len(record["evals"]) == SPEC.n_evals


def test_freed_slot_goes_to_a_queued_job(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    check_freed_slots_go_to_queued_jobs(run[1], SLOTS)


def test_delivered_checkpoint_is_the_best(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    check_delivered_checkpoint_is_the_best(run[1], run[2])


def test_same_seeds_same_curves_and_clean_exit(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, summary, raw = run
    check_enforced_curves_are_prefixes(raw)
    assert summary["comparison"]["slot_hours_saved"] > 0
    assert not pids_naming(str(out))  # no job or server left behind
    assert not pids_naming(summary["engine_root"])  # nor a Slurm daemon of this run
