"""The held-out prediction and the engine model, without a cluster (fast).

A run's raw records are made here from a known engine: the schedule the simulator gives a plan
under a chosen engine model, written out as the testbed's dispatcher writes them (dispatch when
the slots are free, the process's first line a start-up later, each eval at its time, the stop's
eval from the default rule). On those records:

- :func:`fit` recovers the engine that made them (start-up slope in load, stop latency, eval
  timing), and a prediction with the recovered model reproduces the run's mean JCT;
- the prediction reads nothing from the evaluated run: corrupting that run's measured start-ups,
  eval times and stop latencies leaves it unchanged, while the in-sample diagnostic moves;
- the sampled prediction (each job's start-up drawn from the model's spread) is the same for a
  seed, moves with the seed and with the spread, and is the expected-start-up prediction when
  the spread is 0.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalstop import Monitor
from evalstop.detectors import DEFAULT_SPEC, Eval
from evalstop.testbed import WorkloadSpec, make_plan
from evalstop.testbed.calibration import fit, pool, resample
from evalstop.testbed.engine_model import EngineModel, KindTiming, RunObservations, observe
from evalstop.testbed.predict import curve, predict_sampled, predict_trace
from evalstop.testbed.run import PREDICTION, PredictionChanged, finish
from evalstop.testbed.workload import JobPlan

SPEC = WorkloadSpec(n_jobs=12, seed=7, mean_interarrival_s=1.5, step_time_s=0.05, max_slots=2)
SLOTS = 2
TRUE = EngineModel(
    startup_base_s=2.0,
    startup_per_busy_slot_s=0.4,
    startup_per_extra_slot_s=0.5,
    startup_residual_sd_s=0.0,
    stop_latency_s=0.6,
    timing={"numpy": KindTiming(setup_s=0.3, eval_s=0.02, tail_s=0.2, n=1)},
)


def stop_step(c: dict[str, list[Any]], n_steps: int) -> int | None:
    monitor = Monitor(DEFAULT_SPEC)
    for step, score in zip(c["steps"], c["scores"], strict=True):
        if monitor.observe(Eval(step=step, score=score, progress=step / n_steps)).decision.value == "stop":
            return int(step)
    return None


CURVES: dict[JobPlan, dict[str, list[Any]]] = {}


def curves(plan: list[JobPlan]) -> dict[str, dict[str, list[Any]]]:
    """Each job's curve, computed once for the module."""
    for job in plan:
        if job not in CURVES:
            CURVES[job] = curve(job)
    return {j.name: CURVES[j] for j in plan}


def made_run(
    plan: list[JobPlan], model: EngineModel, deviations: dict[str, np.ndarray] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The raw records of a run on an engine that behaves exactly as ``model`` says (each job's
    start-up off by its ``deviations``, per arm in the order of arrival: default none)."""
    pred = predict_trace(plan, model, SLOTS, concurrent=True, curves=curves(plan), deviations=deviations)
    raw: dict[str, list[dict[str, Any]]] = {}
    for arm in ("shadow", "enforced"):
        records = []
        for job in plan:
            p, c = pred["arms"][arm]["jobs"][job.name], pred["curves"][job.name]
            offsets = model.timing_for(job.kind).eval_offsets(c["steps"], job.step_time_s)
            proc = p["start_s"] + p["startup_s"]
            stop = stop_step(c, job.n_steps)
            n = len(c["steps"]) if arm == "shadow" or stop is None else c["steps"].index(stop) + 1
            evals = [
                {
                    "step": s,
                    "score": x,
                    "gold": g,
                    "checkpoint": f"/ck/{job.name}/{s}",
                    "decision": None,
                    "t": proc + t,
                }
                for s, x, g, t in list(zip(c["steps"], c["scores"], c["gold"], offsets, strict=True))[:n]
            ]
            decisions = (
                []
                if stop is None
                else [
                    {
                        "decision": "stop",
                        "shadow": arm == "shadow",
                        "step": stop,
                        "best_step": stop,
                        "best_checkpoint_uri": f"/ck/{job.name}/{stop}",
                    }
                ]
            )
            records.append(
                {
                    "name": job.name,
                    "kind": job.kind,
                    "seed": job.seed,
                    "slots": job.slots,
                    "arrival_s": job.arrival_s,
                    "dispatch_s": p["start_s"],
                    "submitted_s": p["start_s"],
                    "proc_start_s": proc,
                    "end_s": p["end_s"],
                    "evals": evals,
                    "sigterm": arm == "enforced" and stop is not None,
                    "engine_status": "STOPPED" if arm == "enforced" and stop is not None else "SUCCEEDED",
                    "service": {"state": "done", "decisions": decisions},
                }
            )
        raw[arm] = records
    return raw


@pytest.fixture(scope="module")
def plan() -> list[JobPlan]:
    return make_plan(SPEC)


def meta(plan: list[JobPlan]) -> dict[str, Any]:
    spec = {**SPEC.__dict__, "slots": SLOTS, "engine": "ray", "concurrent": True}
    return {"spec": spec, "plan": [j.to_json() for j in plan], "command": "test"}


def test_curves_off_the_cluster_are_the_jobs_curves(plan: list[JobPlan]) -> None:
    job = plan[0]
    c = curve(job)
    assert c == curve(job)  # seeded
    assert len(c["steps"]) == job.n_evals and c["steps"][-1] == job.n_steps


def test_fit_recovers_the_engine_and_the_prediction_its_run(plan: list[JobPlan]) -> None:
    raw = made_run(plan, TRUE)
    assert len({j.slots for j in plan}) == 2 and any(r["sigterm"] for r in raw["enforced"])
    got = fit(raw, plan, {"concurrent": True})
    assert got.startup_base_s == pytest.approx(2.0, abs=0.05)
    assert got.startup_per_busy_slot_s == pytest.approx(0.4, abs=0.02)
    assert got.startup_per_extra_slot_s == pytest.approx(0.5, abs=0.05)
    assert got.stop_latency_s == pytest.approx(0.6, abs=1e-6)
    t = got.timing_for("hack")
    assert (t.setup_s, t.eval_s, t.tail_s) == pytest.approx((0.3, 0.02, 0.2), abs=1e-6)
    assert EngineModel.from_json(json.loads(json.dumps(got.to_json()))) == got
    # the model fitted on the run predicts it (the engine behaved exactly as modelled)
    pred = predict_trace(plan, got, SLOTS, concurrent=True, curves=curves(plan))
    for arm in ("shadow", "enforced"):
        real = np.mean([r["end_s"] - r["arrival_s"] for r in raw[arm]])
        assert pred["arms"][arm]["jct_mean_s"] == pytest.approx(real, rel=0.01), arm


def test_corrupting_the_evaluated_run_leaves_the_prediction_unchanged(
    plan: list[JobPlan], tmp_path: Path
) -> None:
    model = fit(
        made_run(make_plan(WorkloadSpec(**{**SPEC.__dict__, "seed": 8})), TRUE), plan, {"concurrent": True}
    )
    assert model.startup_residual_sd_s > 0  # the spread is sampled, so the draws are checked too
    pred = predict_sampled(plan, model, SLOTS, True, SPEC.seed, replicas=8, curves=curves(plan))
    (tmp_path / PREDICTION).write_text(json.dumps(pred))
    raw = made_run(plan, TRUE)
    first = finish(tmp_path, raw, meta(plan), figures=False)
    rng = np.random.default_rng(0)
    for records in raw.values():  # corrupt every measured start-up, eval time and stop latency
        for r in records:
            r["proc_start_s"] += float(rng.uniform(0.5, 5.0))
            for e in r["evals"]:
                e["t"] += float(rng.uniform(0.0, 3.0))
            if r["sigterm"]:
                r["end_s"] += float(rng.uniform(1.0, 4.0))
    second = finish(tmp_path, raw, meta(plan), figures=False)
    for arm in ("shadow", "enforced"):
        # the analysis recomputes the prediction made before the run, from the model alone
        assert first["prediction"][arm]["pred_jct_mean_s"] == pred["arms"][arm]["jct_mean_s"]
        for key in ("pred_jct_mean_s", "pred_jct_p95_s", "pred_stopped"):
            assert first["prediction"][arm][key] == second["prediction"][arm][key], (arm, key)
            for variant in ("expected_startup", "constant_startup"):
                was = first["prediction"][variant][arm][key]
                assert was == second["prediction"][variant][arm][key], (variant, arm, key)
    assert json.loads((tmp_path / PREDICTION).read_text()) == json.loads(json.dumps(pred))
    # the corruption was real: the in-sample diagnostic (fitted on the run) and the real figures moved
    assert first["simulator"]["startup_s"] != second["simulator"]["startup_s"]
    assert first["simulator"]["stop_latency_s"] != second["simulator"]["stop_latency_s"]
    assert (
        first["prediction"]["enforced"]["real_jct_mean_s"]
        != second["prediction"]["enforced"]["real_jct_mean_s"]
    )


def test_the_sampled_prediction_is_seeded_and_follows_the_spread(plan: list[JobPlan]) -> None:
    c = curves(plan)

    def sampled(model: EngineModel, seed: int) -> dict[str, Any]:
        return predict_sampled(plan, model, SLOTS, True, seed, replicas=6, curves=c)

    spread = replace(TRUE, startup_residual_sd_s=0.8)
    first = sampled(spread, 7)
    assert first["sampling"]["replicas"] == 6
    assert json.dumps(first) == json.dumps(sampled(spread, 7))  # the same seed: the same prediction
    other = sampled(spread, 8)
    for arm in ("shadow", "enforced"):
        replica_means = first["sampling"]["replica_jct_mean_s"][arm]
        assert len(set(replica_means)) == 6  # each replica drew its own start-ups
        assert first["arms"][arm]["jct_mean_s"] == pytest.approx(np.mean(replica_means), rel=1e-12)
        assert other["arms"][arm]["jct_mean_s"] != first["arms"][arm]["jct_mean_s"]
    # no spread: every replica is the expected-start-up prediction, which the result also carries
    flat = sampled(TRUE, 7)
    expected = predict_trace(plan, TRUE, SLOTS, concurrent=True, curves=c)
    for arm in ("shadow", "enforced"):
        mean = expected["arms"][arm]["jct_mean_s"]
        assert flat["arms"][arm]["jct_mean_s"] == pytest.approx(mean, rel=1e-12)
        assert first["expected_startup"]["arms"][arm]["jct_mean_s"] == mean
        assert first["arms"][arm]["jct_mean_s"] != pytest.approx(mean, rel=1e-3)  # the spread moved it
    with pytest.raises(ValueError, match="'replicas' parameter"):
        predict_sampled(plan, TRUE, SLOTS, True, 7, replicas=0, curves=c)


def noisy_run(seed: int, model: EngineModel, sd_s: float) -> RunObservations:
    """What a calibration run of seed ``seed`` observes on an engine behaving as ``model``, each
    start-up off by a seeded normal deviation of ``sd_s``."""
    plan = make_plan(WorkloadSpec(**{**SPEC.__dict__, "seed": seed}))
    rng = np.random.default_rng(seed)
    deviations = {arm: rng.normal(0.0, sd_s, len(plan)) for arm in ("shadow", "enforced")}
    raw = made_run(plan, model, deviations)
    return observe(raw, plan, {"concurrent": True, "spec": {"seed": seed}})


FLAT = replace(TRUE, startup_per_busy_slot_s=0.0)  # no load term: the start-up ignores the load


def test_a_spurious_load_slope_of_one_run_is_dropped_by_the_pooled_calibration() -> None:
    runs = [noisy_run(seed, FLAT, 0.6) for seed in (29, 30, 31)]
    alone = pool(runs[:1], {})  # one draw: noise that looks like a load term
    assert alone.terms["per_busy_slot"]["kept"] and alone.startup_per_busy_slot_s > 0.25
    pooled = pool(runs, {"seeds": [29, 30, 31]})
    term = pooled.terms["per_busy_slot"]
    assert not term["kept"] and pooled.startup_per_busy_slot_s == 0.0
    lo, hi = term["interval"]
    assert lo < 0 < hi and len(term["per_run"]) == 3 and term["per_run"][0] > 0.3
    # a dropped term leaves the start-up at the pooled mean of every job of every run
    startups = [s for r in runs for _, _, s in r.startups]
    if not pooled.terms["per_extra_slot"]["kept"]:
        assert pooled.startup_s(busy=5, width=1) == pytest.approx(np.mean(startups), rel=1e-12)
    assert pooled.startup_mean_s == pytest.approx(np.mean(startups), rel=1e-12)
    # the model file records each run's own fit and observations, and round-trips
    assert [r["fit"]["seed"] for r in pooled.runs] == [29, 30, 31]
    assert pooled.runs[0]["fit"]["per_busy_slot"] == pytest.approx(alone.terms["per_busy_slot"]["estimate"])
    assert EngineModel.from_json(json.loads(json.dumps(pooled.to_json()))) == pooled


def test_a_real_load_slope_survives_the_pooling_shrunk_a_little() -> None:
    pooled = pool([noisy_run(seed, TRUE, 0.2) for seed in (50, 51, 52)], {})
    for name, true in (("per_busy_slot", 0.4), ("per_extra_slot", 0.5)):
        term = pooled.terms[name]
        lo, hi = term["interval"]
        assert term["kept"] and 0 < lo < true < hi, (name, term)
        assert 0.9 < term["shrink"] < 1 and term["value"] == pytest.approx(term["estimate"] * term["shrink"])
    assert pooled.startup_per_busy_slot_s == pytest.approx(0.4, abs=0.06)
    assert pooled.startup_per_extra_slot_s == pytest.approx(0.5, abs=0.06)


def test_the_range_carries_the_calibrations_uncertainty(plan: list[JobPlan]) -> None:
    """Calibration runs that disagree (start-ups 1 s apart) widen the replicas' range, through the
    bootstrap over runs; a model of one run is not resampled, so its prediction is as before."""
    slow = replace(FLAT, startup_base_s=3.0)
    runs = [noisy_run(60, FLAT, 0.3), noisy_run(61, slow, 0.3), noisy_run(62, FLAT, 0.3)]
    pooled = pool(runs, {})
    rng = np.random.default_rng(0)
    assert len({resample(pooled, rng).startup_base_s for _ in range(8)}) > 2  # the draws differ
    no_bootstrap = replace(pooled, runs=[])
    c = curves(plan)
    spread = {}
    for name, model in (("bootstrap", pooled), ("start-up only", no_bootstrap)):
        pred = predict_sampled(plan, model, SLOTS, True, SPEC.seed, replicas=16, curves=c)
        spread[name] = np.ptp(pred["sampling"]["replica_jct_mean_s"]["enforced"])
        assert pred["sampling"]["calibration_runs"] == (3 if model.runs else 1)
    assert spread["bootstrap"] > 1.2 * spread["start-up only"]
    alone = pool(runs[:1], {})
    assert resample(alone, np.random.default_rng(0)) is alone


def test_finish_refuses_a_changed_prediction(
    plan: list[JobPlan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalstop.testbed import predict

    model = replace(TRUE, startup_residual_sd_s=0.5)
    pred = predict_sampled(plan, model, SLOTS, True, SPEC.seed, replicas=4, curves=curves(plan))
    raw = made_run(plan, TRUE)
    (tmp_path / PREDICTION).write_text(json.dumps(pred))
    assert finish(tmp_path, raw, meta(plan), figures=False)["prediction"]  # the same code: accepted
    (tmp_path / "summary.json").unlink()
    # the prediction code changed since the run (here: the start-up sampler's stream)
    monkeypatch.setattr(predict, "STARTUP_STREAM", predict.STARTUP_STREAM + 1)
    with pytest.raises(PredictionChanged, match=r"prediction\.json differs .*\(arms\.") as caught:
        finish(tmp_path, raw, meta(plan), figures=False)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "summary.json").exists()  # refused before writing anything
    monkeypatch.undo()
    # or the stored file was edited
    edited = json.loads(json.dumps(pred))
    edited["arms"]["enforced"]["jct_mean_s"] += 1.0
    (tmp_path / PREDICTION).write_text(json.dumps(edited))
    with pytest.raises(PredictionChanged, match=r"arms\.enforced\.jct_mean_s: stored"):
        finish(tmp_path, raw, meta(plan), figures=False)


def test_bench_reuse_keeps_the_calibration_and_refuses_a_changed_prediction(
    plan: list[JobPlan], tmp_path: Path
) -> None:
    """``bench/testbed.py --reuse`` on a stored point: the analysis again, the engine model file
    untouched; a stored prediction the code does not give is refused in one line, exit 2."""
    root = Path(__file__).resolve().parents[1]
    cal = tmp_path / "quiet" / "calibration" / "draw-0"
    cal.mkdir(parents=True)
    model = pool([noisy_run(seed, TRUE, 0.3) for seed in (70, 71, 72)], {"seeds": [70, 71, 72]})
    model.save(cal / "engine-model.json")
    stored_model = (cal / "engine-model.json").read_bytes()
    seed = tmp_path / "quiet" / f"seed-{SPEC.seed}"
    (seed / "draw-0").mkdir(parents=True)
    pred = predict_sampled(plan, model, SLOTS, True, SPEC.seed, replicas=4, curves=curves(plan))
    (seed / "draw-0" / PREDICTION).write_text(json.dumps(pred))
    (seed / "raw.json").write_text(json.dumps(made_run(plan, TRUE)))
    argv = [sys.executable, str(root / "bench" / "testbed.py"), "--reuse", "--no-figures", "--points"]
    argv += ["quiet", "--jobs", "12", "--seeds", str(SPEC.seed), "--interarrival", "1.5", "--step-time"]
    argv += ["0.05", "--max-slots", "2", "--slots", str(SLOTS), "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}

    def bench() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)

    done = bench()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "seeds x draws beyond 10 %: " in done.stdout
    assert "| 0 | run 72 alone |" in done.stdout  # each calibration run alone, beside the pooled model
    summary = json.loads((seed / "draw-0" / "summary.json").read_text())
    assert summary["prediction"]["enforced"]["pred_jct_mean_s"] == pred["arms"]["enforced"]["jct_mean_s"]
    assert (cal / "engine-model.json").read_bytes() == stored_model  # never refitted or rewritten
    edited = json.loads(json.dumps(pred))
    edited["arms"]["shadow"]["jct_p95_s"] *= 1.01
    (seed / "draw-0" / PREDICTION).write_text(json.dumps(edited))
    done = bench()
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert "arms.shadow.jct_p95_s: stored" in done.stderr and "Traceback" not in done.stderr
    assert (cal / "engine-model.json").read_bytes() == stored_model


def test_the_docs_pytest_selections_select_tests() -> None:
    """Every ``pytest FILE -k WORD`` (or ``-k "A or B"``) in docs/testbed.md selects a test of
    FILE with each word."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "testbed.md").read_text()
    found = re.findall(r"pytest (?:-\w+ )*(tests/\S+\.py) -k (\"[^\"]+\"|\w+)", text)
    assert ("tests/test_testbed_predict.py", "corrupt") in found
    for path, expression in found:
        names = re.findall(r"^def (test_\w+)", (root / path).read_text(), flags=re.M)
        for word in expression.strip('"').split(" or "):
            assert any(word in n for n in names), (path, word)


def test_a_bad_engine_model_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evalstop.cli import main

    bad = tmp_path / "model.json"
    bad.write_text('{"format": "something else"}')
    for path in (bad, tmp_path / "missing.json"):
        assert main(["testbed", "--engine-model", str(path), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert "'--engine-model' parameter" in err and str(path) in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # nothing ran


def test_a_bad_replicas_count_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evalstop.cli import main

    assert main(["testbed", "--replicas", "0", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "'--replicas' parameter" in err and "Got 0" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()  # nothing ran
