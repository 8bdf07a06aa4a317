"""The live testbed at size: >= 40 jobs per seed on a private local Ray head (or, with
``--engine slurm``, a private single-node Slurm), several seeds.

    .venv/bin/python bench/testbed.py                       # 40 jobs, 2 slots, seeds 0 1 2
    .venv/bin/python bench/testbed.py --jobs 8 --seeds 0    # a quick look
    .venv/bin/python bench/testbed.py --engine slurm --out bench-testbed-slurm   # root, slurm-wlm

``--sft-share`` (default 0.2) is the share of supervised fine-tuning jobs; the runs in
docs/testbed.md before they existed used ``--sft-share 0`` (so ``--reuse`` on their stored
``raw.json`` needs ``--sft-share 0`` too, or the plan it records is not the one that ran).
``--grpo-share`` (default 0) makes that share of the trace tiny TRL GRPO runs (the ``hf`` extra),
half against the learned proxy and half against gold; ``--hack-share`` (default 0.5) is the share
of numpy hacking runs. ``--slots`` is per arm: both arms at once take twice that.

Each seed runs ``evalstop testbed`` (both arms, at the same time by default) into
``--out/seed-N`` and the script prints, over seeds, the mean and a bootstrap 95 % confidence
interval of: the real JCT change (enforced vs shadow), slot-hours saved, the simulator's error
on mean and p95 JCT and on start times, and the rule's precision, recall and FPR on these jobs.
It takes about (jobs x per-job wall time / slots) per seed: ~5-10 minutes per seed at 40 jobs,
2 slots, depending on the machine's load. ``--reuse`` redoes the analysis and the report of
every seed from its stored ``raw.json`` (nothing is run again).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from evalstop.experiments.stats import mean_ci
from evalstop.testbed import WorkloadSpec, make_plan
from evalstop.testbed.run import finish, run_testbed


def with_ci(values: list[float | None]) -> str:
    xs = [v for v in values if v is not None and math.isfinite(v)]
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.4g}"
    mean, lo, hi = mean_ci(xs)
    return f"{mean:.4g} [{lo:.4g}, {hi:.4g}]"


def figures(summary: dict[str, Any]) -> dict[str, float | None]:
    sim, arms = summary["simulator"], summary["arms"]
    return {
        "JCT mean change (enforced vs shadow)": summary["comparison"]["jct_mean_change"],
        "JCT p95 change": summary["comparison"]["jct_p95_change"],
        "slot-hours saved": summary["comparison"]["slot_hours_saved"],
        "slot-hours saved (share)": summary["comparison"]["slot_hours_saved_share"],
        "sim error, mean JCT (enforced)": sim["enforced"]["jct_mean_error"],
        "sim error, mean JCT (enforced, constant start-up)": sim["enforced"]["constant_startup"][
            "jct_mean_error"
        ],
        "sim error, mean JCT (shadow)": sim["shadow"]["jct_mean_error"],
        "sim error, p95 JCT (enforced)": sim["enforced"]["jct_p95_error"],
        "sim start-time error, mean (s, enforced)": sim["enforced"]["start_error_mean_s"],
        "sim start-time error, mean abs (s, enforced)": sim["enforced"]["start_error_mean_abs_s"],
        "sim start-time error, max abs (s, enforced)": sim["enforced"]["start_error_max_abs_s"],
        "sim slot-hours saved": sim["slot_hours_saved"]["sim"],
        "start-up mean (s, shadow)": arms["shadow"]["startup_mean_s"],
        "start-up mean (s, enforced)": arms["enforced"]["startup_mean_s"],
        "precision": arms["shadow"]["precision"],
        "recall": arms["shadow"]["recall"],
        "FPR": arms["shadow"]["fpr"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--interarrival", type=float, default=4.0)
    parser.add_argument("--step-time", type=float, default=0.06)
    parser.add_argument("--engine", choices=("ray", "slurm"), default="ray")
    parser.add_argument("--hack-share", type=float, default=0.5)
    parser.add_argument("--sft-share", type=float, default=0.2)
    parser.add_argument("--grpo-share", type=float, default=0.0, help="TRL GRPO jobs (the hf extra)")
    parser.add_argument("--max-slots", type=int, default=1, help="jobs take 1..M slots (default 1)")
    parser.add_argument("--out", type=Path, default=Path("bench-testbed"))
    parser.add_argument(
        "--sequential", action="store_true", help="one arm after the other (default: both at once)"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="redo the analysis and report of a seed from its stored raw.json instead of running it",
    )
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        spec = WorkloadSpec(
            n_jobs=args.jobs,
            seed=seed,
            mean_interarrival_s=args.interarrival,
            step_time_s=args.step_time,
            hack_share=args.hack_share,
            sft_share=args.sft_share,
            grpo_share=args.grpo_share,
            max_slots=args.max_slots,
        )
        command = (
            f"python bench/testbed.py --engine {args.engine} --jobs {args.jobs} --slots {args.slots} "
            f"--seeds {seed} --interarrival {args.interarrival} --step-time {args.step_time} "
            f"--sft-share {args.sft_share}"
            + (f" --hack-share {args.hack_share}" if args.hack_share != 0.5 else "")
            + (f" --grpo-share {args.grpo_share}" if args.grpo_share else "")
            + (f" --max-slots {args.max_slots}" if args.max_slots > 1 else "")
            + (" --sequential" if args.sequential else "")
        )
        folder = args.out / f"seed-{seed}"
        if args.reuse and (folder / "raw.json").exists():
            meta = {
                "spec": {
                    **spec.__dict__,
                    "slots": args.slots,
                    "engine": args.engine,
                    "ray_address": None,
                    "concurrent": not args.sequential,
                },
                "plan": [j.to_json() for j in make_plan(spec)],
                "warm_up_s": None,
                "command": command,
            }
            summary = finish(folder, json.loads((folder / "raw.json").read_text()), meta)
        else:
            summary = run_testbed(
                spec, args.slots, folder, engine=args.engine, command=command, concurrent=not args.sequential
            )
        rows.append(figures(summary))
        print(
            f"seed {seed}: "
            + json.dumps({k: round(v, 4) if v is not None else None for k, v in rows[-1].items()}),
            flush=True,
        )
    print(f"\n{args.jobs} jobs, {args.slots} slots, seeds {args.seeds} (mean [bootstrap 95 % CI] over seeds)")
    for key in rows[0]:
        print(f"  {key:<46} {with_ci([r[key] for r in rows])}")


if __name__ == "__main__":
    main()
