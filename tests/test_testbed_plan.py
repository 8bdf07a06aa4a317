"""The testbed's workload and bookkeeping, without a cluster (fast)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalstop import Monitor
from evalstop.detectors import DEFAULT_SPEC, Eval
from evalstop.testbed import WorkloadSpec, make_plan
from evalstop.testbed.job import training
from evalstop.testbed.summary import rule_scores
from evalstop.workloads.bank import label_curve


def test_plan_is_seeded_fifo_ordered_and_mixed() -> None:
    spec = WorkloadSpec(n_jobs=20, seed=4, hack_share=0.5)
    plan = make_plan(spec)
    assert plan == make_plan(spec)
    assert plan != make_plan(WorkloadSpec(n_jobs=20, seed=5, hack_share=0.5))
    arrivals = [j.arrival_s for j in plan]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert sum(j.kind == "hack" for j in plan) == 10
    assert len({j.seed for j in plan}) == 20


def test_sft_share_is_a_share_of_the_whole_trace() -> None:
    kinds = [j.kind for j in make_plan(WorkloadSpec(n_jobs=40, seed=1, hack_share=0.5, sft_share=0.2))]
    assert (kinds.count("hack"), kinds.count("sft"), kinds.count("healthy")) == (20, 8, 12)
    no_sft = make_plan(WorkloadSpec(n_jobs=20, seed=4, sft_share=0.0))
    assert {j.kind for j in no_sft} == {"hack", "healthy"}
    with pytest.raises(ValueError, match=r"'sft_share' parameter of WorkloadSpec must be <= 1 - hack_share"):
        WorkloadSpec(hack_share=0.7, sft_share=0.5)


def test_grpo_jobs_are_off_by_default_and_sized_on_their_own() -> None:
    from evalstop.testbed.grpo import GRPO_EVALS, GRPO_STEPS

    assert not any(j.kind.startswith("grpo") for j in make_plan(WorkloadSpec(n_jobs=40, seed=2)))
    spec = WorkloadSpec(n_jobs=40, seed=2, hack_share=0.4, sft_share=0.2, grpo_share=0.15)
    plan = make_plan(spec)
    kinds = [j.kind for j in plan]
    assert (kinds.count("grpo-proxy"), kinds.count("grpo-gold"), kinds.count("healthy")) == (3, 3, 10)
    for job in plan:
        grpo = job.kind.startswith("grpo")
        assert (job.n_steps, job.n_evals) == ((GRPO_STEPS, GRPO_EVALS) if grpo else (150, 15))
        assert job.step_time_s == (0.0 if grpo else spec.step_time_s)
    with pytest.raises(ValueError, match="'grpo_share' parameter of WorkloadSpec must be <= 1 - hack_share"):
        WorkloadSpec(hack_share=0.5, sft_share=0.2, grpo_share=0.5)


def test_sft_jobs_are_healthy_and_left_alone_by_the_default_rule() -> None:
    """Supervised fine-tuning (no cluster: the job's own training loop): gold rises, then holds,
    so the label is healthy; these are the negatives the rule's FPR counts. The default rule stops
    none of these seeds (a stop would be a false positive; the testbed reports the rate)."""
    for seed in range(6):
        plan = {"kind": "sft", "seed": seed, "n_steps": 150, "n_evals": 15, "step_time_s": 0.0}
        points = list(training(plan))
        gold = [p.gold for p in points]
        assert [p.step for p in points] == list(range(10, 151, 10))
        assert label_curve(gold)[0] == "healthy" and gold[-1] > gold[0] + 0.1, gold
        monitor = Monitor(DEFAULT_SPEC)
        verdicts = [monitor.observe(Eval(step=p.step, score=p.score, progress=p.step / 150)) for p in points]
        assert not any(v.decision.value == "stop" for v in verdicts), seed
    hack = [p.gold for p in training({**plan, "kind": "hack", "seed": 1})]
    assert label_curve(hack)[0] == "hacking"  # the same loop, trained on the proxy, hacks


def test_plan_is_the_same_in_a_fresh_process() -> None:
    code = "from evalstop.testbed import *; print([j.to_json() for j in make_plan(WorkloadSpec(seed=9))])"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert outs == {f"{[j.to_json() for j in make_plan(WorkloadSpec(seed=9))]}\n"}


@pytest.mark.parametrize(("field", "value"), [("n_jobs", 0), ("hack_share", 1.5), ("step_time_s", -1.0)])
def test_bad_spec_names_the_parameter(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"'{field}' parameter of WorkloadSpec"):
        WorkloadSpec(**{field: value})


def test_rule_scores_leave_borderline_out() -> None:
    jobs = [{"label": "hacking", "decided_stop": True}, {"label": "hacking", "decided_stop": False},
            {"label": "healthy", "decided_stop": True}, {"label": "healthy", "decided_stop": False},
            {"label": "borderline", "decided_stop": True}]
    scores = rule_scores(jobs)
    assert (scores["precision"], scores["recall"], scores["fpr"]) == (0.5, 0.5, 0.5)


@pytest.mark.parametrize(("argv", "message"), [(["--slots", "0"], "'--slots' parameter"),
                                               (["--jobs", "0"], "'n_jobs' parameter"),
                                               (["--max-slots", "3"], "'--max-slots' parameter"),
                                               (["--max-slots", "0"], "'max_slots' parameter"),
                                               (["calibrate", "--calibration-runs", "0"],
                                                "'--calibration-runs' parameter must be an int >= 1. Got 0")])
def test_cli_refuses_bad_sizes_before_starting_anything(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from evalstop.cli import main

    assert main(["testbed", *argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_ray_is_one_line_naming_the_extra() -> None:
    code = "import sys; sys.modules['ray'] = None\nfrom evalstop.cli import main; sys.exit(main(['testbed']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "pip install -e '.[ray]'" in proc.stderr, proc.stderr


def test_unknown_engine_is_refused_before_starting_anything(tmp_path: Path) -> None:
    from evalstop.testbed.run import run_testbed

    with pytest.raises(ValueError, match="'engine' parameter of run_testbed must be one of 'ray', 'slurm'"):
        run_testbed(WorkloadSpec(n_jobs=1), 1, tmp_path / "out", engine="kubernetes")
    assert not (tmp_path / "out").exists()


def test_slurm_times_parse_and_unknown_times_are_none() -> None:
    import time

    from evalstop.testbed.slurm_engine import _slurm_time

    assert _slurm_time("2026-12-01T08:08:00") == time.mktime((2026, 12, 1, 8, 8, 0, 0, 0, -1))
    assert _slurm_time("N/A") is None and _slurm_time("Unknown") is None and _slurm_time("") is None


def test_widths_are_seeded_and_leave_a_one_slot_trace_unchanged() -> None:
    one = make_plan(WorkloadSpec(n_jobs=30, seed=2))
    wide = make_plan(WorkloadSpec(n_jobs=30, seed=2, max_slots=3))
    assert {j.slots for j in one} == {1} and {j.slots for j in wide} == {1, 2, 3}
    assert [(j.arrival_s, j.kind, j.seed) for j in one] == [(j.arrival_s, j.kind, j.seed) for j in wide]
    assert wide == make_plan(WorkloadSpec(n_jobs=30, seed=2, max_slots=3))


def _shadow(n: int, startup_of: Callable[[float], float], widths: list[int]) -> list[dict[str, Any]]:
    """A shadow arm as the testbed records it: 2 slots, strict FIFO, 10 s of training a job,
    arrivals every 2 s, a start-up that depends on when the job was dispatched."""
    jobs: list[dict[str, Any]] = []
    free = [0.0, 0.0]
    for i in range(n):
        arrival, width = 2.0 * i, widths[i]
        free.sort()
        dispatch = max(arrival, free[width - 1], jobs[-1]["dispatch_s"] if jobs else 0.0)
        proc = dispatch + startup_of(dispatch)
        end = proc + 10.0
        for k in range(width):
            free[k] = end
        evals = [{"step": s, "score": 0.5, "gold": 0.5, "t": proc + s / 10} for s in range(10, 101, 10)]
        jobs.append({"name": f"job-{i:03d}", "arrival_s": arrival, "dispatch_s": dispatch,
                     "proc_start_s": proc, "end_s": end, "slots": width, "evals": evals,
                     "startup_s": proc - dispatch})
    return jobs


def test_timed_start_up_follows_the_load_and_the_constant_one_does_not() -> None:
    from evalstop.testbed.simcheck import StartupModel, predict

    def startup(t: float) -> float:  # a quiet machine, then a loaded one
        return 1.0 if t < 60 else 8.0

    shadow = _shadow(40, startup, [1] * 40)
    labels = {j["name"]: "healthy" for j in shadow}
    model = StartupModel.measured(shadow)
    assert model.at(np.array([0.0, 500.0])).tolist() == [1.0, 8.0]
    real_jct = np.mean([j["end_s"] - j["arrival_s"] for j in shadow])
    timed = predict(shadow, labels, 2, model, 0.0, "FIFO", mode="timed")
    const = predict(shadow, labels, 2, model, 0.0, "FIFO", mode="constant")
    timed_jct = np.mean([j["jct_s"] for j in timed["jobs"].values()])
    const_jct = np.mean([j["jct_s"] for j in const["jobs"].values()])
    assert abs(timed_jct / real_jct - 1) < 0.02 < abs(const_jct / real_jct - 1)
    with pytest.raises(ValueError, match="'mode' parameter of predict"):
        predict(shadow, labels, 2, model, 0.0, "FIFO", mode="median")


def test_simulator_runs_the_jobs_widths() -> None:
    from evalstop.testbed.simcheck import StartupModel, predict

    widths = [1, 2, 1, 1, 2, 1, 2, 2, 1, 1]
    shadow = _shadow(len(widths), lambda t: 2.0, widths)
    labels = {j["name"]: "healthy" for j in shadow}
    sim = predict(shadow, labels, 2, StartupModel.measured(shadow), 0.0, "FIFO", mode="constant")["jobs"]
    runs = list(zip(sim.values(), widths, strict=True))
    for name, job in sim.items():
        busy = sum(w for k, w in runs if k["start_s"] <= job["start_s"] < k["end_s"])
        assert busy <= 2, name
    for real, (name, job) in zip(shadow, sim.items(), strict=True):  # strict FIFO, same as the dispatcher
        assert job["start_s"] == pytest.approx(real["dispatch_s"]), name


def test_report_html_is_one_file_with_tables_and_figures(tmp_path: Path) -> None:
    from evalstop.testbed.report import render_html

    (tmp_path / "f.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    md = "# Title\n\nText with `code` and **bold** <b>.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n![fig](f.png)\n"
    page = render_html(md, tmp_path)
    assert "<h1>Title</h1>" in page and "<code>code</code>" in page and "<b>bold</b> &lt;b&gt;" in page
    assert "<tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr>" in page
    assert "src='data:image/png;base64," in page


def test_ray_address_needs_the_ray_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evalstop.cli import main
    from evalstop.testbed.run import run_testbed

    argv = ["testbed", "--engine", "slurm", "--ray-address", "127.0.0.1:1", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "'--ray-address' parameter needs --engine ray. Got --engine 'slurm'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="'ray_address' parameter of run_testbed needs engine 'ray'"):
        run_testbed(WorkloadSpec(n_jobs=1), 1, tmp_path / "out", engine="slurm", ray_address="127.0.0.1:1")
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


def test_a_job_that_never_started_is_simulated_as_its_start_up_only() -> None:
    """The engine can fail a job at dispatch (Slurm marked two FAILED 0.9 s in): it has no process
    start and no evals. The diagnostic must simulate it, not raise (it raised TypeError)."""
    from evalstop.testbed.simcheck import StartupModel, predict

    shadow = _shadow(6, lambda t: 2.0, [1] * 6)
    dead = shadow[2]
    dead.update(proc_start_s=None, end_s=dead["dispatch_s"] + 0.9, evals=[], startup_s=None)
    labels = {j["name"]: "healthy" for j in shadow}
    model = StartupModel.measured(shadow)
    assert model.describe()["n"] == 5
    def held(job: dict[str, Any]) -> float:
        return float(job["end_s"] - job["start_s"])

    sim = predict(shadow, labels, 2, model, 0.0, "FIFO", mode="constant")["jobs"]
    assert held(sim[dead["name"]]) == pytest.approx(model.mean_s)  # its start-up, no training
    assert held(sim[shadow[3]["name"]]) == pytest.approx(model.mean_s + 10.0)
    timed = predict(shadow, labels, 2, model, 0.0, "FIFO", mode="timed")["jobs"]
    assert 0 < held(timed[dead["name"]]) < 10.0
