"""Tail JCT of LAS with and without its starvation guard, against FIFO, under overload.

The paper preset at offered load 1.2 on a fixed 64-GPU cluster (as in ``sim_speed.py``'s
overload section), one seed: p50/p99 JCT in hours of FIFO, LAS, LAS with
``promote_after_wait_s`` set to each limit given (the guard's absolute form), and LAS with
``promote_after_wait_ratio`` set to each ratio given (Tiresias's ratio form: promoted once the
wait reaches that multiple of the job's last run).

    .venv/bin/python bench/las_starvation.py                 # 2,000 jobs, 24/48/96 h, ratios 1/4/16
    .venv/bin/python bench/las_starvation.py --jobs 5000 --limits-h 8 24 --ratios 4
    .venv/bin/python bench/las_starvation.py --min-run-s 3600         # with a 1 h run quantum

With the guard on, LAS ranks through the generic ``order`` path (no static-rank heaps), so it
costs far more CPU per event than plain LAS; keep the job count small.
"""

from __future__ import annotations

import argparse
import time

from evalstop.schedulers import FIFO, LAS, Scheduler
from evalstop.sim.cluster import SimConfig, simulate
from evalstop.sim.metrics import compute_metrics
from evalstop.workloads import PRESETS, generate

HOUR_S = 3600.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--load", type=float, default=1.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limits-h", type=float, nargs="*", default=[24.0, 48.0, 96.0])
    parser.add_argument("--ratios", type=float, nargs="*", default=[1.0, 4.0, 16.0])
    parser.add_argument("--min-run-s", type=float, default=0.0,
                        help="SimConfig.min_run_s, the run quantum after a restore (default 0)")
    args = parser.parse_args()
    config = PRESETS["paper"].with_(n_jobs=args.jobs, total_gpus=args.gpus, offered_load=args.load)
    workload = generate(config, args.seed)
    policies: list[tuple[str, Scheduler]] = [("fifo", FIFO()), ("las", LAS())]
    for h in args.limits_h:
        policies.append((f"las promote_after_wait_s={h:g} h", LAS(promote_after_wait_s=h * HOUR_S)))
    for r in args.ratios:
        policies.append((f"las promote_after_wait_ratio={r:g}", LAS(promote_after_wait_ratio=r)))
    sim = SimConfig(min_run_s=args.min_run_s)
    print(f"paper preset, {args.jobs} jobs, {args.gpus} GPUs, offered load {args.load}, seed {args.seed}, "
          f"min_run_s {args.min_run_s:g}")
    print(f"{'policy':<38}{'p50 JCT h':>11}{'p99 JCT h':>11}{'max JCT h':>11}{'preempts':>10}{'cpu s':>8}")
    for name, scheduler in policies:
        cpu0 = time.process_time()
        result = simulate(workload, scheduler, sim)
        cpu = time.process_time() - cpu0
        m = compute_metrics(result)
        jct_max = max(o.end_s - o.arrival_s for o in result.outcomes)
        preempts = sum(o.n_preemptions for o in result.outcomes)
        print(f"{name:<38}{m.jct_p50_s / HOUR_S:>11.1f}{m.jct_p99_s / HOUR_S:>11.1f}"
              f"{jct_max / HOUR_S:>11.1f}{preempts:>10}{cpu:>8.1f}")


if __name__ == "__main__":
    main()
