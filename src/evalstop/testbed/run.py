"""Run both arms of the testbed on one cluster (a private Ray head, an existing Ray cluster with
``ray_address``, or a private single-node Slurm) and one ``evalstop serve``."""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._validation import check_choice, check_int
from .arm import run_arm, warm_up
from .calibration import pool
from .cluster import Proc, pids_naming, start_service, stop
from .engine import Engine
from .engine_model import EngineModel, RunObservations, observe
from .engines import ENGINES, start_engine
from .predict import REPLICAS, held_out, predict_sampled, predict_trace
from .report import write_report
from .simcheck import compare
from .summary import summarise
from .workload import JobPlan, WorkloadSpec, make_plan

ARMS = ("shadow", "enforced")
PREDICTION = "prediction.json"
ENGINE_MODEL = "engine-model.json"
CALIBRATION_RUNS = 3


def run_testbed(
    spec: WorkloadSpec,
    slots: int,
    out: Path,
    *,
    engine: str = "ray",
    command: str = "",
    timeout_s: float = 1800.0,
    ray_address: str | None = None,
    concurrent: bool = True,
    engine_model: EngineModel | None = None,
    replicas: int = REPLICAS,
) -> dict[str, Any]:
    """Start the cluster (``engine``: ray or slurm; or connect to the Ray cluster at
    ``ray_address``), run the shadow and the enforced arm over the same trace, clean up, and
    write ``raw.json``, ``summary.json``, ``summary.md`` and the report (``report.md``,
    ``report.html``, PNGs) to ``out``.

    ``slots`` is per arm. ``concurrent`` (the default): both arms at the same time, each on its
    own ``slots`` slots of one cluster of ``2 * slots`` (each arm's dispatcher keeps to its
    share), so that both see the same machine at the same moments (on a shared machine, the
    load, and with it the jobs' start-up, drifts over minutes). Otherwise the shadow arm, then
    the enforced arm, on a cluster of ``slots``.

    ``engine_model`` (from ``evalstop testbed calibrate`` on another trace): the trace is
    predicted from its plan and that model before anything starts (``prediction.json``: the
    start-up spread sampled over ``replicas`` replicas, :func:`.predict.predict_sampled`), and the
    summary holds the prediction against the run (``summary["prediction"]``).
    """
    if slots < 1:
        raise ValueError(f"The 'slots' parameter of run_testbed must be an int >= 1. Got {slots!r} instead.")
    check_choice("run_testbed", "engine", engine, ENGINES)
    if ray_address and engine != "ray":
        raise ValueError(f"The 'ray_address' parameter of run_testbed needs engine 'ray'. Got {engine!r}.")
    if spec.max_slots > slots:
        raise ValueError(
            f"The 'max_slots' parameter of WorkloadSpec must be <= the {slots} slots of an arm "
            f"(a wider job never starts). Got {spec.max_slots!r} instead."
        )
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(spec)
    if engine_model is not None:  # before the run: nothing measured on it can reach the prediction
        save_prediction(out, predict_sampled(plan, engine_model, slots, concurrent, spec.seed, replicas))
    else:
        (out / PREDICTION).unlink(missing_ok=True)
    load_start = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="evs-tb-"))  # short: unix socket paths have a length limit
    raw: dict[str, list[dict[str, Any]]] = {}
    warm_up_s = float("nan")
    total = slots * (len(ARMS) if concurrent else 1)
    try:
        cluster = start_engine(engine, root, total, run_id=secrets.token_hex(3), ray_address=ray_address)
        try:
            server = start_service(out, cluster.adapter_settings())
            try:
                warm_up_s = warm_up(cluster, plan)
                raw = _run_arms(plan, out, cluster, server, slots, timeout_s, concurrent)
            finally:
                stop(server)
        finally:
            cluster.close()
    finally:
        for arm in ARMS:  # a job still alive after its cluster went away: ours, by pid
            for pid in pids_naming(str(out / arm) + "/"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)
    (out / "raw.json").write_text(json.dumps(raw, indent=1))
    meta = {
        "spec": {
            **spec.__dict__,
            "slots": slots,
            "engine": engine,
            "ray_address": ray_address,
            "concurrent": concurrent,
        },
        "warm_up_s": warm_up_s,
        "engine_root": str(root),  # the cluster's state, removed (its daemons named it)
        "run_id": cluster.run_id,
        "plan": [j.to_json() for j in plan],
        "command": command,
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
    }
    return finish(out, raw, meta)


def finish(
    out: Path, raw: dict[str, list[dict[str, Any]]], meta: dict[str, Any], *, figures: bool = True
) -> dict[str, Any]:
    """From a run's raw measurements: ``summary.json`` (figures per job and arm, the simulator's
    prediction) and the report. ``meta`` carries ``spec`` (with ``slots``, per arm), ``plan``,
    ``warm_up_s`` and ``command``. Re-running it on a stored ``raw.json`` redoes the analysis.
    The held-out prediction, when the run had one, is recomputed from the engine model and the
    curves in ``prediction.json`` (written before the run), the plan and the trace's seed, with
    the replicas ``prediction.json`` names, and must be the stored one: a prediction the code
    no longer gives (the prediction code changed since the run) raises
    :class:`PredictionChanged` before anything is written. ``figures=False``: the report without
    its PNGs."""
    summary = summarise(raw)
    summary.update(meta)
    summary["simulator"] = compare(summary, raw, int(meta["spec"]["slots"]))
    if (out / PREDICTION).exists():
        stored = json.loads((out / PREDICTION).read_text())
        # from the model, the plan and the curves only, like the prediction before the run
        plan = [JobPlan.from_json(j) for j in meta["plan"]]
        spec = meta["spec"]
        model = EngineModel.from_json(stored["model"])
        shape = (plan, model, int(spec["slots"]), bool(spec.get("concurrent")))
        replicas = int(stored.get("sampling", {}).get("replicas", REPLICAS))
        sampled = predict_sampled(*shape, int(spec["seed"]), replicas, curves=stored["curves"])
        _check_unchanged(out / PREDICTION, stored, sampled)
        summary["prediction"] = held_out(sampled, summary) | {
            "model": stored["model"],
            "sampling": {k: v for k, v in sampled["sampling"].items() if k != "replica_jct_mean_s"},
            "expected_startup": held_out(sampled["expected_startup"], summary),
        }
        flat = model.constant()  # the calibration's mean start-up for every job
        if flat is not None:
            summary["prediction"]["constant_startup"] = held_out(
                predict_trace(plan, flat, *shape[2:], curves=stored["curves"]), summary
            )
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    write_report(out, summary, raw, figures=figures)
    return summary


class PredictionChanged(ValueError):
    """The stored prediction is not the one its engine model and plan give now."""


#: Relative tolerance of the comparison: the prediction is recomputed by the same code from the
#: same inputs, so only a change of code (or of a vectorised math routine) moves it.
SAME_REL = 1e-9


def save_prediction(out: Path, prediction: dict[str, Any]) -> None:
    """Write ``prediction`` (:func:`.predict.predict_sampled`) to ``out/prediction.json``: before
    the trace runs."""
    out.mkdir(parents=True, exist_ok=True)
    (out / PREDICTION).write_text(json.dumps(prediction, indent=1))


def _check_unchanged(path: Path, stored: dict[str, Any], recomputed: dict[str, Any]) -> None:
    where = _first_difference(stored, json.loads(json.dumps(recomputed)), "")
    if where is not None:
        key, was, now = where
        raise PredictionChanged(
            f"The stored prediction {path} differs from the one its engine model and plan give now "
            f"({key or 'the whole file'}: stored {was!r}, recomputed {now!r}): the prediction code "
            "changed since the run; analyse it with the code that made it."
        )


def _first_difference(a: Any, b: Any, key: str) -> tuple[str, Any, Any] | None:
    """The first path (``arms.enforced.jct_mean_s``) where ``a`` and ``b`` differ (numbers
    within ``SAME_REL``), with both values; None when they agree."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            path = f"{key}.{k}" if key else str(k)
            if k not in a or k not in b:
                return path, a.get(k, "<missing>"), b.get(k, "<missing>")
            found = _first_difference(a[k], b[k], path)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{key} (length)", len(a), len(b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _first_difference(x, y, f"{key}[{i}]")
            if found is not None:
                return found
        return None
    if _number(a) and _number(b):
        return None if math.isclose(a, b, rel_tol=SAME_REL, abs_tol=1e-12) else (key, a, b)
    return None if a == b else (key, a, b)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _run_arms(
    plan: list[JobPlan],
    out: Path,
    engine: Engine,
    server: Proc,
    slots: int,
    timeout_s: float,
    concurrent: bool,
) -> dict[str, list[dict[str, Any]]]:
    if not concurrent:
        return {
            arm: run_arm(arm, plan, out, engine, server, slots=slots, timeout_s=timeout_s) for arm in ARMS
        }
    start_at = time.time() + 2.0  # after both tenants exist
    with ThreadPoolExecutor(len(ARMS), thread_name_prefix="testbed-arm") as pool:
        futures = {
            arm: pool.submit(
                run_arm, arm, plan, out, engine, server, slots=slots, timeout_s=timeout_s, start_at=start_at
            )
            for arm in ARMS
        }
        return {arm: future.result() for arm, future in futures.items()}


def calibration_specs(spec: WorkloadSpec, runs: int = CALIBRATION_RUNS) -> list[WorkloadSpec]:
    """The calibration runs' traces: ``spec`` with the seeds ``spec.seed`` .. ``spec.seed + runs - 1``."""
    check_int("calibrate", "runs", runs, min_value=1)
    return [replace(spec, seed=spec.seed + k) for k in range(runs)]


def calibration_folder(out: Path, spec: WorkloadSpec) -> Path:
    return out / f"run-{spec.seed}"


def calibrate(
    spec: WorkloadSpec, slots: int, out: Path, runs: int = CALIBRATION_RUNS, **kwargs: Any
) -> EngineModel:
    """Run the calibration traces of ``spec`` (:func:`calibration_specs`; both arms each, as
    :func:`run_testbed` with ``kwargs``, into ``out/run-SEED``) and write the engine model pooled
    over them to ``out/engine-model.json``."""
    specs = calibration_specs(spec, runs)
    for s in specs:
        run_testbed(s, slots, calibration_folder(out, s), **kwargs)
    return pooled_model(out, [calibration_folder(out, s) for s in specs])


def pooled_model(out: Path, folders: list[Path]) -> EngineModel:
    """The engine model pooled over the calibration runs stored in ``folders`` (each its
    ``raw.json`` and ``summary.json``), written to ``out/engine-model.json``."""
    observations = [observe_run(f, json.loads((f / "summary.json").read_text())) for f in folders]
    first = observations[0].calibration
    model = pool(
        observations,
        {
            "command": first.get("command", ""),
            "seeds": [o.calibration["spec"]["seed"] for o in observations],
            "concurrent": bool(first.get("concurrent")),
        },
    )
    model.save(out / ENGINE_MODEL)
    return model


def observe_run(out: Path, summary: dict[str, Any]) -> RunObservations:
    """What the calibration run stored in ``out`` (its ``raw.json``, with ``summary``) observed."""
    raw = json.loads((out / "raw.json").read_text())
    plan = [JobPlan.from_json(j) for j in summary["plan"]]
    calibration = {
        "command": summary.get("command", ""),
        "spec": summary["spec"],
        "concurrent": bool(summary["spec"].get("concurrent")),
        "run_id": summary.get("run_id"),
        "load_average": summary.get("load_average"),
    }
    return observe(raw, plan, calibration)


def fit_model(out: Path, summary: dict[str, Any]) -> EngineModel:
    """The engine model of the one run stored in ``out`` (its ``raw.json``) with ``summary``."""
    run = observe_run(out, summary)
    return pool([run], run.calibration)
