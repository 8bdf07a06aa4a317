"""What timed evals cost the simulator: CPU seconds of one ``simulate`` call with free evals
against evals that cost GPU time (``SimConfig.eval_cost``), at dense cadence and under the
adaptive policy, for the paper's rule and the default rule (``sim/_eval_time.py``;
docs/model.md "Evals cost GPU time"). Free dense evals take the batch kill plan (paper's rule)
or one ``Monitor.fold`` per job (default rule); timed evals plan each watched job's evals at
arrival. Prints the best of ``--repeats`` process-CPU times per row and the ratio to free evals.

    .venv/bin/python bench/sim_eval_cost.py                 # 20,000 paper jobs on 512 GPUs
    .venv/bin/python bench/sim_eval_cost.py --jobs 2000 --json
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from evalstop.detectors import DEFAULT_SPEC, parse_spec
from evalstop.schedulers import EvalStop, SRTFEst
from evalstop.sim.cluster import SimConfig, simulate
from evalstop.workloads import PRESETS, generate

RULES = {"paper rule": "evalstop:k=2,against=best", "default rule": DEFAULT_SPEC}
ROWS = (("every:1", 0.0), ("every:1", 0.1), ("adaptive:every=3,dense=1", 0.1))


def measure(jobs: int, gpus: int, repeats: int, seed: int) -> list[dict[str, Any]]:
    workload = generate(PRESETS["paper"].with_(n_jobs=jobs, total_gpus=gpus), seed)
    _ = workload.table  # built once, outside the timings
    out = []
    for name, spec in RULES.items():
        rule = parse_spec(spec)
        free = None
        for cadence, cost in ROWS:
            best = float("inf")
            for _ in range(repeats):
                start = time.process_time()
                simulate(workload, EvalStop(SRTFEst(), rule, cadence=cadence), SimConfig(eval_cost=cost))
                best = min(best, time.process_time() - start)
            free = best if free is None else free
            out.append({"rule": name, "cadence": cadence, "eval_cost": cost, "cpu_s": best,
                        "ratio_to_free": best / free})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = measure(args.jobs, args.gpus, args.repeats, args.seed)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{args.jobs} paper jobs on {args.gpus} GPUs, SRTF-Est, best of {args.repeats} (process CPU):")
    print("| rule | cadence | eval_cost | CPU s | vs free dense |")
    print("|---|---|---|---|---|")
    for r in rows:
        cells = (r["rule"], r["cadence"], r["eval_cost"], f"{r['cpu_s']:.2f}", f"{r['ratio_to_free']:.1f}x")
        print("| " + " | ".join(map(str, cells)) + " |")


if __name__ == "__main__":
    main()
