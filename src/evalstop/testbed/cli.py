"""``evalstop testbed``: the live testbed (docs/testbed.md)."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=("run", "calibrate"),
        default="run",
        help="run (default): both arms over the trace, with the held-out prediction if "
        "--engine-model is given; calibrate: run --calibration-runs calibration traces (seeds "
        "--seed, --seed + 1, ...: use seeds no evaluation uses) into OUT/run-SEED and write the "
        "engine model pooled over them to OUT/engine-model.json",
    )
    parser.add_argument(
        "--calibration-runs",
        type=int,
        default=3,
        metavar="N",
        help="with calibrate: the number of calibration runs pooled into the engine model (default 3)",
    )
    parser.add_argument(
        "--engine-model",
        type=Path,
        metavar="FILE",
        help="the engine model from 'evalstop testbed calibrate': the trace is predicted from its "
        "plan and this file before it runs, and the prediction is held against the run",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=64,
        metavar="N",
        help="with --engine-model: the prediction is the average of N replicas, each job's start-up "
        "drawn from the model's spread with the trace's seed (default 64)",
    )
    parser.add_argument("--jobs", type=int, default=8, help="number of training jobs (default 8)")
    parser.add_argument(
        "--engine",
        choices=("ray", "slurm"),
        default="ray",
        help="the scheduler: a private Ray head (default) or a private single-node Slurm "
        "(needs root and slurm-wlm)",
    )
    parser.add_argument(
        "--slots",
        type=int,
        default=2,
        help="slots per arm (the cluster needs twice that unless --sequential; default 2)",
    )
    parser.add_argument(
        "--max-slots",
        type=int,
        default=1,
        metavar="M",
        help="each job takes 1..M slots, drawn from the seed (default 1)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="an existing Ray cluster's dashboard (Jobs API) instead of a private head; it must "
        "declare the 'slot' resource; token from RAY_AUTH_TOKEN",
    )
    parser.add_argument("--seed", type=int, default=0, help="workload seed (arrivals, kinds, job seeds)")
    parser.add_argument(
        "--interarrival",
        type=float,
        default=2.0,
        metavar="S",
        help="mean seconds between arrivals (Poisson; default 2)",
    )
    parser.add_argument("--hack-share", type=float, default=0.5, help="share of proxy-trained jobs (0.5)")
    parser.add_argument(
        "--sft-share", type=float, default=0.2, help="share of supervised fine-tuning jobs (0.2)"
    )
    parser.add_argument(
        "--grpo-share",
        type=float,
        default=0.0,
        help="share of tiny TRL GRPO jobs (default 0; needs the hf extra; slow: about 70 s a job on a "
        "loaded 2-core machine)",
    )
    parser.add_argument(
        "--step-time",
        type=float,
        default=0.06,
        metavar="S",
        help="wall seconds per training step (default 0.06)",
    )
    parser.add_argument("--steps", type=int, default=150, help="training steps per job (default 150)")
    parser.add_argument("--evals", type=int, default=15, help="evals per job (default 15)")
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="run the shadow arm, then the enforced arm, on --slots slots (default: both at once, "
        "each on --slots of 2 x --slots)",
    )
    parser.add_argument("--out", type=Path, default=Path("testbed-out"), help="output directory")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .engine_model import EngineModel
    from .run import ENGINE_MODEL, calibrate, run_testbed
    from .workload import WorkloadSpec

    try:
        model = None if args.engine_model is None else EngineModel.load(args.engine_model)
        if model is not None and args.action == "calibrate":
            raise ValueError("The '--engine-model' parameter is for a run, not for calibrate.")
        if args.slots < 1:
            raise ValueError(f"The '--slots' parameter must be an int >= 1. Got {args.slots!r} instead.")
        if args.calibration_runs < 1:
            raise ValueError(
                "The '--calibration-runs' parameter must be an int >= 1. "
                f"Got {args.calibration_runs!r} instead."
            )
        if args.replicas < 1:
            raise ValueError(
                f"The '--replicas' parameter must be an int >= 1. Got {args.replicas!r} instead."
            )
        spec = WorkloadSpec(
            n_jobs=args.jobs,
            seed=args.seed,
            mean_interarrival_s=args.interarrival,
            hack_share=args.hack_share,
            sft_share=args.sft_share,
            grpo_share=args.grpo_share,
            n_steps=args.steps,
            n_evals=args.evals,
            step_time_s=args.step_time,
            max_slots=args.max_slots,
        )
        if args.ray_address and args.engine != "ray":
            raise ValueError(
                f"The '--ray-address' parameter needs --engine ray. Got --engine {args.engine!r} instead."
            )
        if args.max_slots > args.slots:
            raise ValueError(
                f"The '--max-slots' parameter must be <= --slots ({args.slots}). "
                f"Got {args.max_slots!r} instead."
            )
    except ValueError as exc:
        print(f"evalstop testbed: {exc}", file=sys.stderr)
        return 2
    needs = ["ray"] if args.engine == "ray" else []
    needs += ["torch", "trl"] if args.grpo_share > 0 else []
    for module in (*needs, "fastapi", "uvicorn", "httpx"):  # say which extra is missing before starting
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
    command = "evalstop " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["testbed"] else "evalstop testbed"
    options = {
        "engine": args.engine,
        "command": command,
        "ray_address": args.ray_address,
        "concurrent": not args.sequential,
    }
    if args.action == "calibrate":
        fitted = calibrate(spec, args.slots, args.out, args.calibration_runs, **options)
        print(f"engine model: {fitted.describe()}\nwrote {args.out / ENGINE_MODEL}")
        return 0
    summary = run_testbed(spec, args.slots, args.out, engine_model=model, replicas=args.replicas, **options)
    print((args.out / "summary.md").read_text(), end="")
    c = summary["comparison"]
    print(
        f"\nwrote {args.out}/summary.json, summary.md, raw.json, report.md, report.html; "
        f"slot-hours saved {c['slot_hours_saved']:.4f}"
    )
    return 0
