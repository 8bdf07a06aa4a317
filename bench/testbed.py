"""The live testbed at size, and the simulator's held-out prediction of it, at several operating
points: on a private local Ray head (or, with ``--engine slurm``, a private single-node Slurm).

    .venv/bin/python bench/testbed.py                                  # every point, 8 seeds, 40 jobs
    .venv/bin/python bench/testbed.py --points quiet --jobs 12 --seeds 0 1 2 3 4 5 6 7
    .venv/bin/python bench/testbed.py --points quiet --reuse           # the analysis again, from raw.json

Per operating point (``--points``; docs/testbed.md, "Held-out prediction"):

1. **calibrate**, ``--calibration-draws`` times: each draw runs ``--calibration-runs`` calibration
   traces of their own seeds (``--calibration-jobs`` jobs; draw D takes the seeds from
   ``--calibration-seed + D x runs`` upward, none an evaluation seed) and pools them into
   ``OUT/POINT/calibration/draw-D/engine-model.json`` (``evalstop.testbed.calibration``);
2. **evaluate**: for each seed, the trace is predicted from its plan by every draw's model before
   it runs (``OUT/POINT/seed-N/draw-D/prediction.json``), then both arms run once
   (``OUT/POINT/seed-N``), and each draw's prediction is held against that run
   (``seed-N/draw-D/summary.json``).

``--reuse`` redoes the analysis from the stored ``raw.json`` files and reads each draw's stored
``engine-model.json`` as it is (never refitted or rewritten); it stops with one line, exit 2, when
a stored prediction is not the one the code gives now. It also prints, per draw, each calibration
run alone (its least squares terms as fitted: the single-draw calibration) beside the pooled
model, both predicting the stored runs with each job's expected start-up.

The points: ``quiet`` (the default trace: 150 steps of 0.06 s, so ~9 s of training against a
start-up of one to a few seconds); ``loaded`` (the same with a CPU-bound process started by this
script running through calibration and evaluation); ``long`` (0.25 s steps: start-up small against
training); ``short`` (0.01 s steps: start-up larger than training); ``grpo`` (a share
``--grpo-share`` of tiny TRL GRPO jobs, the ``hf`` extra). Every point takes ``--jobs``,
``--slots`` etc. from the command line.

Printed per point: per calibration draw, the enforced arm's mean JCT error over the seeds with its
95 % t-interval, the seeds beyond 10 % and the seeds whose real mean JCT the prediction's 95 %
range holds; then per draw, for each figure, the mean over seeds with a 95 % Student-t interval and the
value of every seed, percentages as percentages: the held-out prediction error on mean and p95 JCT
(enforced and shadow arm; each job's start-up sampled from the engine model's spread over
``--replicas`` replicas, and beside it the variants with each job's expected start-up and with one
constant start-up), the GRPO jobs' run time and the GRPO jobs beside them, the in-sample
diagnostic (the simulator fitted on the evaluated run itself: not a prediction), the real JCT
change and slot-hours saved, the rule's precision, recall and FPR, the arms' start-up means and
the machine's load average at the start and end of each run. Time: about (jobs x per-job wall
time / slots) per seed and per calibration (~4 minutes at 40 jobs and 2 slots on Ray, the
default point).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
from scipy import stats

from evalstop.testbed import WorkloadSpec, make_plan
from evalstop.testbed.calibration import run_alone
from evalstop.testbed.engine_model import EngineModel
from evalstop.testbed.grpo import GRPO_EVALS
from evalstop.testbed.predict import REPLICAS, predict_sampled, predict_trace
from evalstop.testbed.run import (
    ENGINE_MODEL,
    PREDICTION,
    PredictionChanged,
    calibration_folder,
    calibration_specs,
    finish,
    pooled_model,
    run_testbed,
    save_prediction,
)
from evalstop.testbed.workload import JobPlan

#: Operating point -> (changes to the trace, a CPU-bound process alongside?)
POINTS: dict[str, tuple[dict[str, float], bool]] = {
    "quiet": ({}, False),
    "loaded": ({}, True),
    "long": ({"step_time_s": 0.25}, False),
    "short": ({"step_time_s": 0.01}, False),
    "grpo": ({"grpo_share": -1.0}, False),  # -1: the --grpo-share of the command line
}
HOG = "while True: pass"


def t_interval(xs: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % Student-t interval (nan with fewer than 2 values)."""
    x = np.asarray(xs, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


PERCENT = "%"  # a relative change or error: signed percentage
SHARE = "share"  # a share: unsigned percentage


def figures(summary: dict[str, Any]) -> dict[str, tuple[float | None, str]]:
    """(value, unit) per figure of one seed; relative changes and shares are printed as
    percentages."""
    pred, sim, arms, c = (
        summary.get("prediction"),
        summary["simulator"],
        summary["arms"],
        summary["comparison"],
    )
    rows: dict[str, tuple[float | None, str]] = {}
    if pred is not None:
        rows |= {
            "held-out error, mean JCT, enforced": (pred["enforced"]["jct_mean_error"], PERCENT),
            "held-out error, p95 JCT, enforced": (pred["enforced"]["jct_p95_error"], PERCENT),
            "held-out error, mean JCT, enforced, expected start-up": (
                pred["expected_startup"]["enforced"]["jct_mean_error"]
                if "expected_startup" in pred
                else None,
                PERCENT,
            ),
            "held-out error, p95 JCT, enforced, expected start-up": (
                pred["expected_startup"]["enforced"]["jct_p95_error"]
                if "expected_startup" in pred
                else None,
                PERCENT,
            ),
            "held-out error, mean JCT, enforced, constant start-up": (
                pred["constant_startup"]["enforced"]["jct_mean_error"]
                if "constant_startup" in pred
                else None,
                PERCENT,
            ),
            "held-out error, mean JCT, shadow": (pred["shadow"]["jct_mean_error"], PERCENT),
            "held-out error, p95 JCT, shadow": (pred["shadow"]["jct_p95_error"], PERCENT),
            "held-out start-time error, mean abs (s), enforced": (
                pred["enforced"]["start_error_mean_abs_s"],
                "s",
            ),
            "start-up mean (s), enforced, real": (pred["enforced"].get("real_startup_mean_s"), "s"),
            "start-up mean (s), enforced, predicted": (pred["enforced"].get("pred_startup_mean_s"), "s"),
            INSIDE: (
                None
                if "real_inside_band" not in pred["enforced"]
                else float(pred["enforced"]["real_inside_band"]),
                SHARE,
            ),
            "held-out stops = real stops (share of seeds)": (
                float(pred["enforced"]["pred_stopped"] == pred["enforced"]["real_stopped"]),
                SHARE,
            ),
        }
    rows |= {
        "in-sample diagnostic error, mean JCT, enforced": (sim["enforced"]["jct_mean_error"], PERCENT),
        "real JCT mean change (enforced vs shadow)": (c["jct_mean_change"], PERCENT),
        "real JCT p95 change": (c["jct_p95_change"], PERCENT),
        "slot-hours saved (share)": (c["slot_hours_saved_share"], PERCENT),
        "precision": (arms["shadow"]["precision"], ""),
        "recall": (arms["shadow"]["recall"], ""),
        "FPR": (arms["shadow"]["fpr"], ""),
        "dispatch to first line mean (s), shadow": (arms["shadow"]["startup_mean_s"], "s"),
        "dispatch to first line mean (s), enforced": (arms["enforced"]["startup_mean_s"], "s"),
    }
    grpo = grpo_runs(summary)
    rows["GRPO jobs, first line to end mean (s)"] = (
        float(np.mean([r[0] for r in grpo])) if grpo else None,
        "s",
    )
    rows["GRPO jobs, other GRPO jobs beside (mean)"] = (
        float(np.mean([r[1] for r in grpo])) if grpo else None,
        "",
    )
    load = summary.get("load_average")
    if load:
        rows["load average (1 min) at start"] = (load["start"][0], "")
        rows["load average (1 min) at end"] = (load["end"][0], "")
    return rows


def grpo_runs(summary: dict[str, Any]) -> list[tuple[float, float]]:
    """Per GRPO job that ran every eval (both arms: they share one clock): its time from the first
    line to its end, and the number of other GRPO jobs (either arm) running beside it, averaged
    over that time. The GRPO jobs are unpaced CPU work, so the second drives the first."""
    jobs = [
        (arm, j)
        for arm, js in summary["jobs"].items()
        for j in js
        if j["kind"].startswith("grpo") and j["proc_start_s"] is not None
    ]
    out = []
    for arm, j in jobs:
        s, e = j["proc_start_s"], j["end_s"]
        if j["enforced_stop"] or j["n_evals"] < GRPO_EVALS or e <= s:
            continue
        beside = sum(
            max(0.0, min(e, k["end_s"]) - max(s, k["proc_start_s"]))
            for a, k in jobs
            if (a, k["name"]) != (arm, j["name"])
        )
        out.append((e - s, beside / (e - s)))
    return out


def contention(runs: list[tuple[float, float]]) -> str:
    """One line: GRPO run time against the GRPO jobs beside it (least squares, correlation)."""
    if len(runs) < 3:
        return ""
    t, beside = (np.array([r[i] for r in runs]) for i in range(2))
    slope, base = np.polyfit(beside, t, 1)
    return (
        f"GRPO jobs that ran every eval ({len(runs)}, calibration and seeds): first line to end "
        f"{t.min():.1f}-{t.max():.1f} s; = {base:.1f} s + {slope:.1f} s per other GRPO job beside it "
        f"(correlation {np.corrcoef(beside, t)[0, 1]:.2f})"
    )


def fmt(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "-"
    if unit == SHARE:
        return f"{value:.0%}"
    return f"{value:+.1%}" if unit == PERCENT else f"{value:.3g}"


def table(rows: list[dict[str, tuple[float | None, str]]], seeds: list[int]) -> list[str]:
    lines = [f"  {'':<56} {'mean [95 % t-interval]':<26} per seed ({' / '.join(map(str, seeds))})"]
    for key in rows[0]:
        unit = rows[0][key][1]
        values = [r[key][0] if key in r else None for r in rows]
        xs = [v for v in values if v is not None and math.isfinite(v)]
        if not xs:
            continue
        mean, lo, hi = t_interval(xs)
        ci = f"{fmt(mean, unit)} [{fmt(lo, unit)}, {fmt(hi, unit)}]" if len(xs) > 1 else fmt(mean, unit)
        each = " / ".join("-" if v is None else fmt(v, unit) for v in values)
        lines.append(f"  {key:<56} {ci:<26} {each}")
    return lines


def spec_for(args: argparse.Namespace, point: str, seed: int, n_jobs: int) -> WorkloadSpec:
    changes = dict(POINTS[point][0])
    if changes.get("grpo_share") == -1.0:
        changes["grpo_share"] = args.grpo_share
    return WorkloadSpec(
        **{
            "n_jobs": n_jobs,
            "seed": seed,
            "mean_interarrival_s": args.interarrival,
            "step_time_s": args.step_time,
            "hack_share": args.hack_share,
            "sft_share": args.sft_share,
            "grpo_share": 0.0,
            "max_slots": args.max_slots,
            **changes,
        }
    )


def command(args: argparse.Namespace, point: str, seed: int) -> str:
    return (
        f"python bench/testbed.py --points {point} --engine {args.engine} --jobs {args.jobs} "
        f"--slots {args.slots} --seeds {seed} --interarrival {args.interarrival} "
        f"--step-time {args.step_time} "
        f"--sft-share {args.sft_share} --hack-share {args.hack_share} --max-slots {args.max_slots} "
        f"--calibration-jobs {args.calibration_jobs} --calibration-seed {args.calibration_seed} "
        f"--calibration-runs {args.calibration_runs} --calibration-draws {args.calibration_draws}"
        + (f" --grpo-share {args.grpo_share}" if point == "grpo" else "")
        + (" --sequential" if args.sequential else "")
    )


def meta_of(folder: Path, spec: WorkloadSpec, args: argparse.Namespace, cmd: str) -> dict[str, Any]:
    """What :func:`finish` needs besides ``raw.json``: the trace, and what only the run knew
    (warm-up time, run id, engine root, load average) from its ``summary.json``."""
    old = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").exists() else {}
    return {
        "spec": {
            **spec.__dict__,
            "slots": args.slots,
            "engine": args.engine,
            "ray_address": None,
            "concurrent": not args.sequential,
        },
        "plan": [j.to_json() for j in make_plan(spec)],
        "command": old.get("command", cmd),
        **{k: old[k] for k in ("warm_up_s", "run_id", "engine_root", "load_average") if k in old},
    }


T = TypeVar("T")


def attempt(run: Callable[[], T], what: str, folder: Path, tries: int = 2) -> T:
    """``run()`` into ``folder``, once more from an empty folder if the engine or the service
    failed under it (a private Ray head can die on a heavily loaded machine); every failure is
    printed."""
    for i in range(1, tries + 1):
        try:
            return run()
        except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError, httpx.HTTPError) as exc:
            print(f"{what}: attempt {i} of {tries} failed: {type(exc).__name__}: {exc}", flush=True)
            if i == tries:
                raise
            shutil.rmtree(folder, ignore_errors=True)  # the failed run's service database too
    raise AssertionError("unreachable")


def calibration_draw(
    args: argparse.Namespace, point: str, draw: int, options: dict[str, Any]
) -> tuple[EngineModel, list[Path]]:
    """Calibration draw ``draw`` of ``point``: ``--calibration-runs`` runs of their own seeds
    pooled into ``OUT/POINT/calibration/draw-D/engine-model.json``, and the runs' folders. With
    ``--reuse`` the stored model is read as it is: the one the evaluations used, never refitted."""
    cal = args.out / point / "calibration" / f"draw-{draw}"
    first = args.calibration_seed + draw * args.calibration_runs
    specs = calibration_specs(spec_for(args, point, first, args.calibration_jobs), args.calibration_runs)
    folders = [calibration_folder(cal, s) for s in specs]
    if args.reuse:
        return EngineModel.load(cal / ENGINE_MODEL), folders
    for s, folder in zip(specs, folders, strict=True):
        attempt(
            partial(run_testbed, s, args.slots, folder, command=f"calibration of {point}", **options),
            f"{point} calibration draw {draw} seed {s.seed}",
            folder,
        )
    return pooled_model(cal, folders), folders


def evaluate_seed(
    args: argparse.Namespace, point: str, seed: int, models: list[EngineModel], options: dict[str, Any]
) -> list[dict[str, Any]]:
    """One evaluation seed, run once (``OUT/POINT/seed-N``) and predicted by every draw's model
    before it runs (``seed-N/draw-D/prediction.json``); the summary held against each draw's
    prediction. With ``--reuse`` (and a stored ``raw.json``) the analysis again, which refuses a
    prediction the code no longer gives."""
    spec, folder = spec_for(args, point, seed, args.jobs), args.out / point / f"seed-{seed}"
    cmd = command(args, point, seed)
    draws = [folder / f"draw-{d}" for d in range(len(models))]
    if not (args.reuse and (folder / "raw.json").exists()):

        def run() -> dict[str, Any]:
            plan = make_plan(spec)
            for draw, model in zip(draws, models, strict=True):  # before the run
                shape = (args.slots, not args.sequential, seed, args.replicas)
                save_prediction(draw, predict_sampled(plan, model, *shape))
            return run_testbed(spec, args.slots, folder, command=cmd, **options)

        attempt(run, f"{point} seed {seed}", folder)
    raw = json.loads((folder / "raw.json").read_text())
    meta = meta_of(folder, spec, args, cmd)
    return [finish(draw, raw, meta, figures=not args.no_figures) for draw in draws]


def run_point(args: argparse.Namespace, point: str) -> list[list[dict[str, tuple[float | None, str]]]]:
    """Per calibration draw, per evaluation seed: the figures."""
    options = {"engine": args.engine, "concurrent": not args.sequential}
    hog = subprocess.Popen([sys.executable, "-c", HOG]) if POINTS[point][1] else None
    try:
        models, runs = [], []
        for draw in range(args.calibration_draws):
            model, folders = calibration_draw(args, point, draw, options)
            print(f"{point} draw {draw}: engine model {model.describe()}", flush=True)
            models.append(model)
            stored = [f / "summary.json" for f in folders if (f / "summary.json").exists()]
            runs += [r for f in stored for r in grpo_runs(json.loads(f.read_text()))]
        rows: list[list[dict[str, tuple[float | None, str]]]] = [[] for _ in models]
        for seed in args.seeds:
            for draw, summary in enumerate(evaluate_seed(args, point, seed, models, options)):
                rows[draw].append(figures(summary))
                brief = {k: None if v is None else round(v, 4) for k, (v, _) in rows[draw][-1].items()}
                print(f"{point} draw {draw} seed {seed}: {json.dumps(brief)}", flush=True)
            runs += grpo_runs(summary)
        if contention(runs):
            print(f"{point}: {contention(runs)}", flush=True)
        return rows
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def single_draws(args: argparse.Namespace, point: str) -> list[str]:
    """With ``--reuse``: each calibration run alone, its least squares terms as fitted (the
    single-draw calibration), against its draw's pooled model, both with each job's expected
    start-up, on the stored evaluation runs: the enforced arm's mean JCT error over the seeds."""
    lines = [
        "  | draw | model | start-up: base + per busy slot (s) | mean JCT error, enforced [95 % t] | "
        "seeds beyond 10 % |",
        "  |---|---|---|---|---|",
    ]
    seeds = [args.out / point / f"seed-{seed}" for seed in args.seeds]
    stored = [json.loads((f / "draw-0" / "summary.json").read_text()) for f in seeds]
    curves = [json.loads((f / "draw-0" / PREDICTION).read_text())["curves"] for f in seeds]
    for draw in range(args.calibration_draws):
        pooled = EngineModel.load(args.out / point / "calibration" / f"draw-{draw}" / ENGINE_MODEL)
        models = [("pooled", pooled)] + [
            (f"run {r['fit']['seed']} alone", run_alone(pooled, i)) for i, r in enumerate(pooled.runs)
        ]
        for name, model in models:
            errors = []
            for summary, c in zip(stored, curves, strict=True):
                plan = [JobPlan.from_json(j) for j in summary["plan"]]
                pred = predict_trace(plan, model, args.slots, not args.sequential, curves=c)
                real = summary["arms"]["enforced"]["jct_mean_s"]
                errors.append(pred["arms"]["enforced"]["jct_mean_s"] / real - 1)
            mean, lo, hi = t_interval(errors)
            lines.append(
                f"  | {draw} | {name} | {model.startup_base_s:.2f} {model.startup_per_busy_slot_s:+.3f} | "
                f"{fmt(mean, PERCENT)} [{fmt(lo, PERCENT)}, {fmt(hi, PERCENT)}] | "
                f"{sum(abs(e) > 0.10 for e in errors)} of {len(errors)} |"
            )
    return lines


MEAN_ERROR = "held-out error, mean JCT, enforced"
INSIDE = "real mean JCT inside the 95 % range, enforced (share of seeds)"


def draws_table(rows: list[list[dict[str, tuple[float | None, str]]]]) -> list[str]:
    """Per calibration draw: the enforced arm's mean JCT error over the seeds with its 95 %
    t-interval, the seeds beyond 10 %, and the seeds whose real mean JCT the range holds."""
    lines = [
        "  | draw | mean JCT error, enforced [95 % t-interval] | seeds beyond 10 % | real inside the range |",
        "  |---|---|---|---|",
    ]
    beyond_all = cells = 0
    for draw, seeds in enumerate(rows):
        errors = [e for r in seeds if (e := r.get(MEAN_ERROR, (None, ""))[0]) is not None]
        inside = [x for r in seeds if (x := r.get(INSIDE, (None, ""))[0]) is not None]
        if not errors:
            continue
        mean, lo, hi = t_interval(errors)
        beyond = sum(abs(e) > 0.10 for e in errors)
        beyond_all, cells = beyond_all + beyond, cells + len(errors)
        lines.append(
            f"  | {draw} | {fmt(mean, PERCENT)} [{fmt(lo, PERCENT)}, {fmt(hi, PERCENT)}] | "
            f"{beyond} of {len(errors)} | {sum(bool(x) for x in inside)} of {len(inside)} |"
        )
    lines.append(f"  seeds x draws beyond 10 %: {beyond_all} of {cells}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", nargs="+", choices=tuple(POINTS), default=list(POINTS))
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    parser.add_argument("--calibration-jobs", type=int, default=16)
    parser.add_argument(
        "--calibration-seed",
        type=int,
        default=1000,
        help="the first calibration seed; draw D's runs take the next --calibration-runs seeds from "
        "here + D x runs (none may be an evaluation seed)",
    )
    parser.add_argument(
        "--calibration-runs", type=int, default=3, help="runs pooled into each engine model (default 3)"
    )
    parser.add_argument(
        "--calibration-draws",
        type=int,
        default=1,
        help="pooled engine models per point, each from its own runs; every seed is predicted by each",
    )
    parser.add_argument("--interarrival", type=float, default=4.0)
    parser.add_argument("--step-time", type=float, default=0.06)
    parser.add_argument("--engine", choices=("ray", "slurm"), default="ray")
    parser.add_argument("--hack-share", type=float, default=0.5)
    parser.add_argument("--sft-share", type=float, default=0.2)
    parser.add_argument("--grpo-share", type=float, default=0.2, help="TRL GRPO jobs at the grpo point")
    parser.add_argument("--max-slots", type=int, default=1, help="jobs take 1..M slots (default 1)")
    parser.add_argument(
        "--replicas",
        type=int,
        default=REPLICAS,
        help="start-up samples the prediction averages over (default %(default)s; a --reuse keeps the "
        "run's own)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-testbed"))
    parser.add_argument("--sequential", action="store_true", help="one arm after the other")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="redo the analysis (and the calibration fit) from the stored raw.json instead of running",
    )
    parser.add_argument("--no-figures", action="store_true", help="with --reuse: the reports without PNGs")
    args = parser.parse_args()
    for name in ("calibration_runs", "calibration_draws"):
        if getattr(args, name) < 1:
            flag, value = name.replace("_", "-"), getattr(args, name)
            parser.error(f"--{flag} must be an int >= 1. Got {value} instead.")
    n_calibration = args.calibration_runs * args.calibration_draws
    calibration = range(args.calibration_seed, args.calibration_seed + n_calibration)
    if set(calibration) & set(args.seeds):
        parser.error(
            f"the calibration seeds {calibration.start}-{calibration.stop - 1} include an evaluation seed "
            f"({sorted(set(calibration) & set(args.seeds))}): they must be held out"
        )
    try:
        results = {point: run_point(args, point) for point in args.points}
    except PredictionChanged as exc:
        print(f"bench/testbed.py: {exc}", file=sys.stderr)
        sys.exit(2)
    except ValueError as exc:  # a --reuse without the stored engine model
        if not args.reuse:
            raise
        print(f"bench/testbed.py: --reuse: {exc}", file=sys.stderr)
        sys.exit(2)
    print(
        f"\n{args.jobs} jobs, {args.slots} slots per arm, {args.engine}; per point {args.calibration_draws} "
        f"engine model(s), each pooled over {args.calibration_runs} calibration runs of "
        f"{args.calibration_jobs} jobs (seeds {calibration.start}-{calibration.stop - 1})"
    )
    for point, rows in results.items():
        print(f"\n{point}, per calibration draw:")
        print("\n".join(draws_table(rows)))
        for draw, seeds in enumerate(rows):
            print(f"\n{point}, draw {draw}:")
            print("\n".join(table(seeds, args.seeds)))
        if args.reuse:
            print(f"\n{point}, each calibration run alone (least squares as fitted) and the pooled model:")
            print("\n".join(single_draws(args, point)))


if __name__ == "__main__":
    main()
