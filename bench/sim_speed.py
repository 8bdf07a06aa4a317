"""How fast the cluster simulator runs, and how its cost grows with the workload.

For each size (``N_JOBSxN_GPUS``) and each policy (SRTF-Est, and SRTF-Est wrapped in EvalStop
with k-declines against the best eval), a fresh Python process draws the paper preset resized to
that many jobs and GPUs (same offered load), then simulates it. It reports, separately, the time
to generate the workload and the time to simulate it, simulated jobs per second, and the peak
resident memory of that process (after generation, and at the end). A fresh process per run
makes the memory figures honest: nothing from an earlier run is still allocated.

The scaling exponent between two consecutive sizes is log(time ratio) / log(jobs ratio): 1.0 is
linear; for n log n between 20,000 and 200,000 jobs it is about 1.09.

    .venv/bin/python bench/sim_speed.py                      # default sizes
    .venv/bin/python bench/sim_speed.py --sizes 2000x64 --json
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

DEFAULT_SIZES = "20000x6500,200000x16384"
POLICIES = ("srtf", "evalstop(srtf)")


def parse_size(text: str) -> tuple[int, int]:
    """``"20000x6500"`` -> (20000, 6500)."""
    try:
        n_jobs, total_gpus = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size is N_JOBSxN_GPUS, e.g. 20000x6500. Got {text!r}.") from None
    if n_jobs < 1 or total_gpus < 1:
        raise argparse.ArgumentTypeError(f"a size needs at least 1 job and 1 GPU. Got {text!r}.")
    return n_jobs, total_gpus


def parse_sizes(text: str) -> list[tuple[int, int]]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def _peak_rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _make_scheduler(policy: str) -> Any:
    from evalstop.detectors import KDeclines
    from evalstop.schedulers import EvalStop, SRTFEst

    if policy == "srtf":
        return SRTFEst()
    return EvalStop(SRTFEst(), KDeclines(against="best"))


def run_one(n_jobs: int, total_gpus: int, policy: str, seed: int) -> dict[str, Any]:
    """Generate and simulate one size under one policy, in this process."""
    from evalstop.sim.cluster import simulate
    from evalstop.workloads import PRESETS, generate

    config = PRESETS["paper"].with_(n_jobs=n_jobs, total_gpus=total_gpus)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    workload = generate(config, seed)
    wall1, cpu1 = time.perf_counter(), time.process_time()
    rss_gen = _peak_rss_mib()
    result = simulate(workload, _make_scheduler(policy))
    wall2, cpu2 = time.perf_counter(), time.process_time()
    peak_rss = _peak_rss_mib()
    gc.collect()  # what a full collection of everything built so far costs, for the record
    return {
        "n_jobs": n_jobs, "total_gpus": total_gpus, "policy": policy, "seed": seed,
        "generate_s": wall1 - wall0, "simulate_s": wall2 - wall1, "jobs_per_s": n_jobs / (wall2 - wall1),
        "generate_cpu_s": cpu1 - cpu0, "simulate_cpu_s": cpu2 - cpu1,
        "full_gc_after_s": time.perf_counter() - wall2,
        "peak_rss_gen_mib": rss_gen, "peak_rss_mib": peak_rss,
        "n_killed": sum(o.killed for o in result.outcomes),
        "n_preemptions": sum(o.n_preemptions for o in result.outcomes),
        "event_log_hash": result.event_log_hash,
    }


def run_in_child(n_jobs: int, total_gpus: int, policy: str, seed: int) -> dict[str, Any]:
    """``run_one`` in a fresh interpreter, so its peak memory is its own."""
    argv = [sys.executable, __file__, "--child", f"{n_jobs}x{total_gpus}", "--policy", policy]
    argv += ["--seed", str(seed)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return record


def _n_log_n(n: int) -> float:
    return n * math.log(max(n, 2))


def scaling_exponents(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """log(time ratio) / log(jobs ratio) between consecutive sizes, per policy and per phase."""
    rows = []
    for policy in dict.fromkeys(r["policy"] for r in records):
        mine = [r for r in records if r["policy"] == policy]
        for small, big in itertools.pairwise(mine):
            log_n = math.log(big["n_jobs"] / small["n_jobs"])
            if log_n == 0:
                continue
            n_log_n = math.log(_n_log_n(big["n_jobs"]) / _n_log_n(small["n_jobs"]))
            rows.append({
                "policy": policy, "from": small["n_jobs"], "to": big["n_jobs"],
                "generate": math.log(big["generate_s"] / small["generate_s"]) / log_n,
                "simulate": math.log(big["simulate_s"] / small["simulate_s"]) / log_n,
                "n_log_n": n_log_n / log_n,
            })
    return rows


def format_table(records: Sequence[dict[str, Any]]) -> str:
    head = f"{'size':>14}  {'policy':<15}{'generate_s':>11}{'simulate_s':>11}{'sim_cpu_s':>10}{'jobs/s':>9}"
    head += f"{'rss_gen_MiB':>12}{'peak_rss_MiB':>13}"
    lines = [head]
    for r in records:
        size = f"{r['n_jobs']}x{r['total_gpus']}"
        lines.append(
            f"{size:>14}  {r['policy']:<15}{r['generate_s']:>11.2f}{r['simulate_s']:>11.2f}"
            f"{r['simulate_cpu_s']:>10.2f}{r['jobs_per_s']:>9.0f}{r['peak_rss_gen_mib']:>12.0f}"
            f"{r['peak_rss_mib']:>13.0f}"
        )
    exps = scaling_exponents(records)
    if exps:
        lines.append("")
        lines.append("scaling exponent log(t2/t1)/log(n2/n1)  (1.0 = linear; n log n shown for reference)")
        for e in exps:
            lines.append(
                f"  {e['policy']:<15}{e['from']:>7} -> {e['to']:<7} generate {e['generate']:.2f}"
                f"  simulate {e['simulate']:.2f}  (n log n: {e['n_log_n']:.2f})"
            )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES),
                        help=f"comma-separated N_JOBSxN_GPUS (default {DEFAULT_SIZES})")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help=f"comma-separated subset of {', '.join(POLICIES)}")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--child", type=parse_size, help=argparse.SUPPRESS)
    parser.add_argument("--policy", choices=POLICIES, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child is not None:
        n_jobs, total_gpus = args.child
        print(json.dumps(run_one(n_jobs, total_gpus, args.policy, args.seed)))
        return 0
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        raise SystemExit(f"unknown policies {unknown}; choose from {list(POLICIES)}")
    records = [run_in_child(n, g, policy, args.seed) for n, g in args.sizes for policy in policies]
    if args.json:
        print(json.dumps({"records": records, "scaling": scaling_exponents(records)}, indent=2))
    else:
        print(format_table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
