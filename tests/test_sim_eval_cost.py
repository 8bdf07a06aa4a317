"""Evals that cost GPU time on the job's GPUs, and a cadence policy that decides which evals a
job runs (issue 20, item 4; ``sim/_eval_time.py``, docs/model.md "Evals cost GPU time")."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evalstop.detectors import DEFAULT_SPEC, Eval, KDeclines, Monitor, parse_cadence, parse_spec, watch
from evalstop.experiments.policies import PolicySpec
from evalstop.experiments.report import write_report
from evalstop.experiments.simulate_cmd import load_config, metrics_table_from_rows
from evalstop.experiments.spec import SpecError, load_studies, parse_study
from evalstop.experiments.suite import run_suite
from evalstop.schedulers import FIFO, LAS, EvalStop, Scheduler, SRTFEst
from evalstop.sim.cluster import SimConfig, simulate
from evalstop.sim.metrics import Metrics, compute_metrics
from evalstop.workloads import (
    KINDS,
    PRESETS,
    JobSpec,
    JobTruth,
    KindShape,
    Workload,
    WorkloadConfig,
    generate,
)

SHAPES = {kind: KindShape((1,), (1.0,), 1.0, 0.5) for kind in KINDS}
#: peaks at the 4th eval, then declines at every eval
SCORES = (0.1, 0.2, 0.3, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1)


def one_job(scores: tuple[float, ...] = SCORES, gpus: int = 2, duration_s: float = 1000.0) -> Workload:
    n = len(scores)
    evals = tuple(Eval(i + 1, s, (i + 1) / n, 1.0) for i, s in enumerate(scores))
    spec = JobSpec(0, 0, "rlhf", gpus, 0.0, duration_s, evals)
    peak = max(range(n), key=scores.__getitem__)
    truth = JobTruth(True, duration_s, (peak + 1) / n, scores, max(scores), scores[-1])
    return Workload(WorkloadConfig(n_jobs=1, total_gpus=4, shapes=SHAPES), 0, (spec,), (truth,))


def test_an_unstopped_job_runs_its_evals_on_its_own_gpus() -> None:
    result = simulate(one_job(), FIFO(), SimConfig(eval_cost=0.2))
    job = result.columns
    cost_s = 0.2 * 1000.0 / 10  # a fifth of the 100 s of training between two evals
    assert job["end_s"][0] == pytest.approx(1000.0 + 10 * cost_s)
    assert job["gpu_s_eval"][0] == pytest.approx(2 * 10 * cost_s)
    assert job["gpu_s_useful"][0] == pytest.approx(2 * 1000.0)  # training only
    assert job["end_progress"][0] == 1.0 and job["n_evals"][0] == 10
    metrics = compute_metrics(result)
    assert metrics.eval_gpu_hours == pytest.approx(2 * 10 * cost_s / 3600)
    assert metrics.gpu_hours_total == pytest.approx((2 * 1000.0 + 2 * 10 * cost_s) / 3600)


def test_a_kill_comes_at_the_end_of_the_eval_that_fired_and_pays_only_the_evals_run() -> None:
    rule = KDeclines(k=2, against="best")
    free = simulate(one_job(), EvalStop(FIFO(), rule))
    paid = simulate(one_job(), EvalStop(FIFO(), rule), SimConfig(eval_cost=0.5))
    assert free.columns["killed"][0] and paid.columns["killed"][0]
    assert free.columns["end_s"][0] == pytest.approx(600.0)  # the 6th eval: two declines after the 4th
    assert paid.columns["end_s"][0] == pytest.approx(600.0 + 6 * 50.0)
    assert paid.columns["n_evals"][0] == 6 and paid.columns["gpu_s_eval"][0] == pytest.approx(2 * 6 * 50.0)
    assert paid.columns["stop_progress"][0] == pytest.approx(0.6)
    assert paid.columns["true_delivered"][0] == free.columns["true_delivered"][0] == 0.4


@pytest.mark.parametrize("cadence", ["every:3", "adaptive:every=3,dense=1", "every:1"])
def test_the_rule_sees_only_the_evals_its_cadence_runs(cadence: str) -> None:
    rule = KDeclines(k=2, against="best")
    evals = one_job().jobs[0].evals
    used = watch(Monitor(rule, parse_cadence(cadence)), evals)
    result = simulate(one_job(), EvalStop(FIFO(), rule, cadence=cadence), SimConfig(eval_cost=0.1))
    cols = result.columns
    assert cols["n_evals"][0] == len(used)
    trained = 1000.0 * evals[used[-1]].progress if cols["killed"][0] else 1000.0
    assert cols["end_s"][0] == pytest.approx(trained + len(used) * 10.0)
    if cadence == "every:3":  # evals 3, 6, 9: 0.3 (best), 0.3, 0.15: one decline, no stop
        assert used == [2, 5, 8] and not cols["killed"][0]
    else:
        assert cols["killed"][0]


def test_a_cadence_alone_thins_the_evals_without_costing_time() -> None:
    result = simulate(one_job(), EvalStop(FIFO(), KDeclines(k=2, against="best"), cadence="every:3"))
    assert result.columns["n_evals"][0] == 3 and result.columns["gpu_s_eval"][0] == 0.0
    assert result.columns["end_s"][0] == 1000.0


SCHEDULERS = {
    "srtf": lambda: SRTFEst(), "las": lambda: LAS(), "fifo": lambda: FIFO(),
}


@pytest.mark.parametrize("base", sorted(SCHEDULERS))
@pytest.mark.parametrize(("cadence", "cost"), [("every:1", 0.15), ("every:3", 0.0), ("adaptive", 0.15)])
def test_both_eval_paths_give_the_same_run(base: str, cadence: str, cost: float) -> None:
    workload = generate(PRESETS["realistic"].with_(n_jobs=150, total_gpus=16, offered_load=1.2,
                                                   evals_per_job=12), 4)

    def run(path: str) -> tuple[str, dict[str, bytes | list[object]]]:
        scheduler: Scheduler = EvalStop(SCHEDULERS[base](), parse_spec(DEFAULT_SPEC), cadence=cadence)
        result = simulate(workload, scheduler, SimConfig(eval_cost=cost, eval_path=path))
        columns = result.columns  # bit for bit (a NaN equals itself)
        return result.event_log_hash, {
            k: v.tolist() if v.dtype == object else np.ascontiguousarray(v).tobytes()
            for k, v in columns.items()
        }

    assert run("fast") == run("events")


def test_eval_time_slows_the_cluster_and_a_sparser_cadence_gives_some_back() -> None:
    workload = generate(PRESETS["paper"].with_(n_jobs=200, total_gpus=16, offered_load=0.9,
                                               evals_per_job=20), 2)
    rule = parse_spec("evalstop:k=2,against=best")
    rows = {
        (cad, cost): compute_metrics(simulate(workload, EvalStop(SRTFEst(), rule, cadence=cad),
                                              SimConfig(eval_cost=cost)))
        for cad in ("every:1", "every:3") for cost in (0.0, 0.2)
    }
    dense_free, dense_paid = rows["every:1", 0.0], rows["every:1", 0.2]
    assert dense_free.eval_gpu_hours == 0.0 and dense_paid.eval_gpu_hours > 0.0
    # Decisions do not depend on what evals cost: the same jobs are killed.
    assert (dense_free.true_positives, dense_free.false_positives) == (
        dense_paid.true_positives, dense_paid.false_positives)
    assert dense_paid.jct_mean_s > dense_free.jct_mean_s
    # Training GPU-hours are the same; the total adds the eval time (and restore overhead moves).
    def training(m: Metrics) -> float:
        return m.gpu_hours_total - m.eval_gpu_hours - m.overhead_gpu_hours

    assert training(dense_paid) == pytest.approx(training(dense_free), rel=1e-9)
    sparse = rows["every:3", 0.2]
    assert sparse.eval_gpu_hours < 0.5 * dense_paid.eval_gpu_hours
    assert sparse.evals_per_rlhf_job < dense_paid.evals_per_rlhf_job
    assert math.isnan(dense_free.evals_per_rlhf_job)  # evals not timed: not counted


def test_free_dense_evals_leave_the_outcome_columns_as_they_were() -> None:
    workload = generate(PRESETS["paper"].with_(n_jobs=120, total_gpus=16), 1)
    plain = simulate(workload, EvalStop(SRTFEst(), parse_spec(DEFAULT_SPEC)))
    named = simulate(workload, EvalStop(SRTFEst(), parse_spec(DEFAULT_SPEC), cadence="every:1"),
                     SimConfig(eval_cost=0.0))
    assert "gpu_s_eval" not in plain.columns and plain.event_log_hash == named.event_log_hash
    for name, column in plain.columns.items():
        assert np.array_equal(column, named.columns[name], equal_nan=column.dtype != object), name


def test_bad_eval_cost_and_cadence_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="eval_cost"):
        SimConfig(eval_cost=-0.1)
    with pytest.raises(ValueError, match="cadence 'weekly'"):
        EvalStop(FIFO(), cadence="weekly")
    with pytest.raises(ValueError, match="'cadence' parameter of policy 'x' needs a 'detector'"):
        PolicySpec("x", cadence="every:3").build()
    doc = {"name": "s", "title": "t", "description": "d", "seeds": 2, "baseline": "a", "treatment": "a",
           "policy": [{"label": "a", "detector": "default", "cadence": "every:0"}]}
    with pytest.raises(SpecError, match=r"The 'n' parameter of Every"):
        parse_study(doc)


def test_the_eval_cadence_study_reports_eval_gpu_hours_saved_against_recall(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the figure needs the plot extra")
    study = load_studies(["eval-cadence"])[0]
    small = tuple(replace(p, workload=p.workload.with_(n_jobs=80, total_gpus=16)) for p in study.points[:2])
    study = replace(study, points=small, x_values=study.x_values[:2])
    run_suite([study], tmp_path, seeds=2, workers=1, use_cache=False, show_progress=False)
    write_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    figure = "eval-cadence--eval_savings.png"
    assert figure in md and (tmp_path / "figures" / figure).is_file()
    table = md[md.index("Eval cost: evals run"):]
    rows = [line for line in table.splitlines()[2:] if line.startswith("| 0.")]
    assert len(rows) == 2 * len(study.policies)
    dense = next(r for r in rows if "| default, dense |" in r)
    sparse = next(r for r in rows if "| default, every:3 |" in r)
    assert dense.split("|")[7].strip() == "—"  # the baseline has no change against itself
    assert sparse.split("|")[7].strip().startswith("-")  # every 3rd eval saves eval GPU-hours


def test_evalstop_simulate_reads_the_cadence_and_the_eval_cost() -> None:
    doc = {"workload": {"preset": "paper", "n_jobs": 50}, "sim": {"eval_cost": 0.1},
           "policy": [{"label": "a", "detector": "default", "cadence": "adaptive:every=3,dense=1"}]}
    config = load_config(doc)
    assert config.sim.eval_cost == 0.1 and config.policies[0].cadence == "adaptive:every=3,dense=1"
    scheduler, _ = config.policies[0].build(config.sim)
    assert isinstance(scheduler, EvalStop) and scheduler.cadence == parse_cadence("adaptive") and not (
        scheduler.dense_evals)


def test_evalstop_simulate_prints_the_eval_columns_only_when_evals_are_timed() -> None:
    rule = KDeclines(k=2, against="best")
    free = compute_metrics(simulate(one_job(), EvalStop(FIFO(), rule))).as_dict()
    paid = compute_metrics(simulate(one_job(), EvalStop(FIFO(), rule), SimConfig(eval_cost=0.5))).as_dict()
    assert "eval GPU-h" not in metrics_table_from_rows([free])
    table = metrics_table_from_rows([free, paid])
    assert table.splitlines()[0].endswith("| evals per RLHF job | eval GPU-h |")
    assert table.splitlines()[3].endswith("| 6.0 | 0 |")  # 6 evals of 50 s on 2 GPUs: 0.17 GPU-h
    assert "eval GPU-h: GPU-hours spent running evals" in table


def test_a_detector_sweep_keeps_the_policys_cadence() -> None:
    doc = {"name": "s", "title": "t", "description": "d", "seeds": 2, "baseline": "a", "treatment": "a",
           "workload": {"n_jobs": 20, "total_gpus": 8},
           "policy": [{"label": "a", "detector": "evalstop:k=2", "cadence": "every:3", "watch": "all"}],
           "sweep": {"param": "detector.k", "values": [1, 3]}}
    points = parse_study(doc).points
    assert [p.policies[0].detector for p in points] == ["evalstop:k=1", "evalstop:k=3"]
    assert [(p.policies[0].cadence, p.policies[0].watch) for p in points] == [("every:3", None)] * 2


def test_a_policy_table_takes_the_fields_defaults() -> None:
    assert PolicySpec.from_doc({}) == PolicySpec("srtf")
    assert PolicySpec.from_doc({"base": "fifo"}) == PolicySpec("fifo", "fifo", watch=("rlhf",))
    spec = PolicySpec.from_doc({"label": "x", "detector": "default", "watch": ["rlhf", "lora"],
                                "cadence": "every:2"})
    assert (spec.label, spec.base, spec.watch, spec.cadence) == ("x", "srtf", ("rlhf", "lora"), "every:2")
    assert PolicySpec.from_doc({"watch": "all"}).watch is None
    with pytest.raises(ValueError, match=r"'watch' must be \"all\" or a list of job kinds\. Got 'rlhf'"):
        PolicySpec.from_doc({"watch": "rlhf"})
