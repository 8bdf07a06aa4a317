"""The live testbed, for real: a private Ray head with 2 slots per arm, a real ``evalstop serve``
(SQLite, loopback), and 8 real policy-gradient training jobs submitted as Ray jobs, each
reporting its eval to the service in remote mode. Both arms run over the same trace, at once.

Asserted on the enforced arm: every hacking job (labelled from its gold curve in the shadow
arm) was stopped by the service through the Ray Jobs adapter (Ray reports STOPPED and the job
got SIGTERM); its slot went to a job that was queued, before the stopped job would have ended
on its own; the delivered checkpoint is the service's best checkpoint and exists, pinned. The
report (Markdown, HTML, PNGs) is written and carries the measured numbers.

A second, smaller run goes through the command line to a Ray head the test started itself
(``--ray-address``), with jobs one and two slots wide (``--max-slots 2``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the testbed needs the ray extra: pip install -e '.[ray]'")
pytest.importorskip("fastapi", reason="the testbed needs the service extra: pip install -e '.[service]'")

from evalstop.testbed import WorkloadSpec
from evalstop.testbed.cluster import pids_naming
from evalstop.testbed.run import run_testbed
from evalstop.testbed.simcheck import slot_ready_s
from testbed_checks import (
    by_name,
    check_delivered_checkpoint_is_the_best,
    check_enforced_curves_are_prefixes,
    check_freed_slots_go_to_queued_jobs,
)

pytestmark = pytest.mark.slow
SPEC = WorkloadSpec(n_jobs=8, seed=3, mean_interarrival_s=1.0, step_time_s=0.04)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    out = tmp_path_factory.mktemp("testbed")
    summary = run_testbed(SPEC, 2, out, timeout_s=300)
    raw = json.loads((out / "raw.json").read_text())
    return out, summary, raw


def test_every_hacking_job_is_stopped_through_ray(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    _, summary, raw = run
    enforced, records = by_name(summary["jobs"]["enforced"]), by_name(raw["enforced"])
    hacking = [n for n, j in enforced.items() if j["label"] == "hacking"]
    assert hacking, "the trace must contain hacking jobs"
    for name in hacking:
        job, record = enforced[name], records[name]
        assert job["enforced_stop"], f"{name}: the service never decided to stop it"
        assert record["engine_status"] == "STOPPED", f"{name}: Ray says {record['engine_status']}"
        assert record["sigterm"], f"{name}: the training process never got SIGTERM"
        assert record["service"]["state"] == "stopped"
        assert len(record["evals"]) < SPEC.n_evals  # it did not run to the end
    for name, job in enforced.items():  # nothing else was touched
        if not job["decided_stop"]:
            assert records[name]["engine_status"] == "SUCCEEDED"
    for record in raw["shadow"]:  # shadow: decisions logged, never enacted
        assert record["engine_status"] == "SUCCEEDED"
        assert len(record["evals"]) == SPEC.n_evals


def test_freed_slot_goes_to_a_queued_job(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    check_freed_slots_go_to_queued_jobs(run[1], 2)


def test_delivered_checkpoint_is_the_best(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    check_delivered_checkpoint_is_the_best(run[1], run[2])


def test_same_seeds_same_curves_and_clean_exit(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, summary, raw = run
    check_enforced_curves_are_prefixes(raw)
    # the stops saved training time (total slot time also carries the start-ups, which on a loaded
    # machine vary by more than the 8-job trace saves)
    train = {
        arm: sum(j["train_s"] * j["slots"] for j in summary["jobs"][arm]) for arm in ("shadow", "enforced")
    }
    assert train["enforced"] < train["shadow"] - 1.0, train
    assert not pids_naming(str(out))  # no job, head or server left behind


def test_report_files_carry_the_numbers(run: tuple[Path, dict[str, Any], dict[str, Any]]) -> None:
    out, summary, _ = run
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    sim = summary["simulator"]
    numbers = [
        f"{summary['arms']['shadow']['jct_mean_s']:.1f}",
        f"{summary['arms']['enforced']['jct_mean_s']:.1f}",
        f"{summary['comparison']['slot_hours_saved']:.4f}",
        f"{sim['enforced']['jct_mean_error']:+.1%}",
        f"{sim['enforced']['start_error_mean_abs_s']:.2f}",
        f"{sim['startup_model']['mean_s']:.2f}",
    ]
    for number in numbers:
        assert number in md, number
        assert number in page, number
    for png in ("jct_cdf.png", "curves.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in md
    assert page.count("src='data:image/png;base64,") == 2 and "<table>" in page
    # the start-up model is the shadow arm's measured start-ups (slots free to the process's first
    # line), and the prediction is per job
    shadow = summary["jobs"]["shadow"]
    measured = sorted(j["proc_start_s"] - slot_ready_s(j, shadow) for j in shadow)
    assert all(j["arrival_s"] <= slot_ready_s(j, shadow) <= j["dispatch_s"] for j in shadow)
    assert sim["startup_model"]["n"] == len(measured) == SPEC.n_jobs
    assert sim["startup_model"]["min_s"] == measured[0] and sim["startup_model"]["max_s"] == measured[-1]
    assert set(sim["enforced"]["start_errors_s"]) == {j["name"] for j in summary["jobs"]["enforced"]}
    lo, hi = sim["enforced"]["sim_jct_mean_band_s"]
    assert lo <= sim["enforced"]["sim_jct_mean_s"] <= hi


MULTI = ["--jobs", "3", "--seed", "1", "--slots", "2", "--max-slots", "2", "--interarrival", "1"]
MULTI += ["--step-time", "0.03", "--steps", "100", "--evals", "10"]


def test_existing_cluster_and_multi_slot_jobs(
    run: tuple[Path, dict[str, Any], dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Also the held-out prediction: the engine model is fitted on the 8-job run (the
    calibration), and this other trace is predicted from it before it runs."""
    import httpx

    from evalstop.cli import main
    from evalstop.testbed.ray_head import private_head
    from evalstop.testbed.run import fit_model
    from evalstop.testbed.simcheck import StartupModel, predict
    from evalstop.testbed.summary import labels_from

    model_file = tmp_path / "engine-model.json"
    fit_model(run[0], run[1]).save(model_file)

    with private_head("evs-h-", 4) as head:  # started here, not by the testbed: 2 slots per arm
        monkeypatch.setenv("RAY_AUTH_TOKEN", head.info["token"])
        address = head.info["address"].removeprefix("http://")
        argv = [
            *MULTI,
            "--ray-address",
            address,
            "--engine-model",
            str(model_file),
            "--out",
            str(tmp_path / "out"),
        ]
        assert main(["testbed", *argv]) == 0
        assert head.proc is not None and head.proc.poll() is None, (
            "the testbed stopped a cluster it did not start"
        )
        ray_jobs = httpx.get(
            f"{head.info['address']}/api/jobs/", headers={"Authorization": f"Bearer {head.info['token']}"}
        ).json()
    assert "report.html" in capsys.readouterr().out
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    raw = json.loads((out / "raw.json").read_text())
    assert summary["spec"]["ray_address"] == address
    widths = {r["name"]: r["slots"] for r in raw["shadow"]}
    assert sorted(widths.values()) == [1, 1, 2]
    # what Ray reserved for each job (its supervisor actor's slot resource) is the job's width
    assert all(r["engine_slots"] == r["slots"] for arm in raw.values() for r in arm)
    ours = [j for j in ray_jobs if str(j.get("submission_id", "")).startswith(("shadow-", "enforced-"))]
    assert len(ours) == 6 and all(j["status"] in {"SUCCEEDED", "STOPPED"} for j in ours)
    prefixes = tuple(f"{arm}-{summary['run_id']}-" for arm in ("shadow", "enforced"))
    assert summary["run_id"] and all(j["submission_id"].startswith(prefixes) for j in ours)
    for arm in ("shadow", "enforced"):
        jobs = summary["jobs"][arm]
        for j in jobs:
            assert j["slot_s"] == pytest.approx((j["end_s"] - j["dispatch_s"]) * j["slots"])
        for j in jobs:  # never more slots busy than the cluster has (real and simulated)
            busy = sum(k["slots"] for k in jobs if k["dispatch_s"] <= j["dispatch_s"] < k["end_s"])
            assert busy <= 2, (arm, j["name"], busy)
    # the simulator runs the same widths: one replica (a single start-up value) is one schedule
    pred = predict(
        raw["shadow"], labels_from(raw["shadow"]), 2, StartupModel((3.0,)), 0.0, "FIFO", replicas=1
    )
    sim = pred["jobs"]
    for name, j in sim.items():
        busy = sum(widths[n] for n, k in sim.items() if k["start_s"] <= j["start_s"] < k["end_s"])
        assert busy <= 2, (name, busy)
    wide = next(n for n, w in widths.items() if w == 2)
    assert sim[wide]["start_s"] >= max(
        k["end_s"] for n, k in sim.items() if sim[n]["start_s"] < sim[wide]["start_s"]
    )
    assert (out / "report.md").exists() and (out / "report.html").exists()
    # the prediction was made before the run, from the plan and the model: the curves it computed
    # off the cluster are the ones the jobs reported, and it is held against the run
    prediction = json.loads((out / "prediction.json").read_text())
    first_start = min(p.stat().st_mtime for p in out.glob("*/job-*/plan.json"))
    assert (out / "prediction.json").stat().st_mtime <= first_start
    for record in raw["shadow"]:
        c = prediction["curves"][record["name"]]
        assert [(e["step"], e["score"], e["gold"]) for e in record["evals"]] == list(
            zip(c["steps"], c["scores"], c["gold"], strict=True)
        )
    held = summary["prediction"]
    assert held["labels_match"] and set(held) >= {"shadow", "enforced", "slot_hours_saved"}
    assert f"{held['enforced']['jct_mean_error']:+.1%}" in (out / "report.md").read_text()
