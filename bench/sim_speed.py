"""How fast the cluster simulator runs, and how its cost grows with the workload.

Without ``--sizes`` it prints three sections, each measured in this run (see bench/README.md):

- ``queue``: a burst trace (20,000 jobs on 6,500 GPUs, every arrival within 20 minutes) under
  FIFO and SJF with true durations, strict and backfilling: CPU time of evalstop against the lean
  reference loop in ``lean_sim.py`` (each side run QUEUE_REPEATS times, alternately, and its
  fastest run kept; the median ratio of the back-to-back pairs is printed beside it), and
  whether every start time matches it.
- ``overload``: offered load 1.2 and 1.5 on a fixed 64-GPU cluster, SRTF-Est and LAS, 20,000 and
  100,000 jobs (the fastest of OVERLOAD_REPEATS runs of each): the cost exponent
  log(t2 / t1) / log(n2 / n1).
- ``million``: 1,000,000 jobs on 16,384 GPUs, EvalStop over SRTF-Est, in a fresh process:
  generation + simulation wall time and peak RSS.

With ``--sizes``: for each size (``N_JOBSxN_GPUS``) and each policy (SRTF-Est, and SRTF-Est
wrapped in EvalStop with k-declines against the best eval), a fresh Python process draws the
paper preset resized to that many jobs and GPUs (same offered load), then simulates it. It
reports, separately, the time to generate the workload and the time to simulate it, simulated
jobs per second, and the peak resident memory of that process (after generation, and at the
end). A fresh process per run makes the memory figures honest: nothing from an earlier run is still allocated.

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
from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_SIZES = "20000x6500,200000x16384"
POLICIES = ("srtf", "evalstop(srtf)")
SECTIONS = ("queue", "overload", "million")
#: (queue size, overload sizes and GPUs, million size) for the full run and for --quick.
FULL: dict[str, Any] = {
    "queue": (20000, 6500), "overload": ((20000, 100000), 64), "million": (1_000_000, 16384)
}
QUICK: dict[str, Any] = {"queue": (2000, 650), "overload": ((2000, 4000), 16), "million": (20000, 328)}
BURST_WINDOW_S = 1200.0
#: Runs of each side in the queue section; the fastest of each is compared.
QUEUE_REPEATS = 9
#: Runs of each size and policy in the overload section; the fastest is used.
OVERLOAD_REPEATS = 2


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


def run_one(n_jobs: int, total_gpus: int, policy: str, seed: int, lean: bool = False) -> dict[str, Any]:
    """Generate and simulate one size under one policy, in this process. With ``lean``, also
    time the lean reference loop on the same trace (after the memory figures are taken)."""
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
    reference = _lean_reference(workload, result) if lean else {}
    return {**reference,
        "n_jobs": n_jobs, "total_gpus": total_gpus, "policy": policy, "seed": seed,
        "generate_s": wall1 - wall0, "simulate_s": wall2 - wall1, "jobs_per_s": n_jobs / (wall2 - wall1),
        "generate_cpu_s": cpu1 - cpu0, "simulate_cpu_s": cpu2 - cpu1,
        "full_gc_after_s": time.perf_counter() - wall2,
        "peak_rss_gen_mib": rss_gen, "peak_rss_mib": peak_rss,
        "n_killed": int(result.columns["killed"].sum()),
        "n_preemptions": int(result.columns["n_preemptions"].sum()),
        "event_log_hash": result.event_log_hash,
    }


def _lean_reference(workload: Any, result: Any) -> dict[str, Any]:
    """CPU time of the lean loop (FIFO, no preemption) on the same arrivals and widths, each job
    running from its start to its end in evalstop's run: what a minimal event loop costs on this
    trace and this machine, so the million figure can be read against the machine's speed."""
    from lean_sim import lean_starts

    table, cols = workload.table, result.columns
    submit = table.arrival_s.tolist()
    run_s = (cols["end_s"] - cols["start_s"]).tolist()
    cpu0 = time.process_time()
    lean_starts(submit, table.gpus.tolist(), run_s, workload.config.total_gpus,
                lambda j: (submit[j], j), backfill=False)
    return {
        "lean_cpu_s": time.process_time() - cpu0,
        "n_queued": int((cols["start_s"] > cols["arrival_s"]).sum()),
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


# -- sections ---------------------------------------------------------------------------------
def burst_workload(n_jobs: int, total_gpus: int, seed: int) -> Any:
    """The paper preset with exact budgets (so SRTF-Est without preemption is SJF on true
    durations), every arrival squeezed into ``BURST_WINDOW_S``: a long queue forms at once."""
    from evalstop.workloads import PRESETS, Workload, generate

    config = PRESETS["paper"].with_(n_jobs=n_jobs, total_gpus=total_gpus, budget_error_sigma=0.0)
    workload = generate(config, seed)
    arrival_s = workload.table.arrival_s
    scale = BURST_WINDOW_S / float(arrival_s[-1]) * (1 - 1e-9)
    return Workload(workload.config, workload.seed, table=workload.table.replace(arrival_s=arrival_s * scale))


def queue_section(
    n_jobs: int, total_gpus: int, seed: int, repeats: int = QUEUE_REPEATS
) -> list[dict[str, Any]]:
    """Each side ``repeats`` times, alternating lean and evalstop, each side's fastest run kept:
    one run of 0.1-0.3 s on a shared machine moves by tens of percent, the fastest of several
    much less (both sides get the same treatment, so the ratio stays fair). Also the median of
    the ratios of the back-to-back pairs, which a change in the machine's load during the
    section moves least."""
    import numpy as np
    from lean_sim import lean_starts

    from evalstop.schedulers import FIFO, Scheduler, SRTFEst
    from evalstop.sim.cluster import simulate

    workload = burst_workload(n_jobs, total_gpus, seed)
    submit = workload.table.arrival_s.tolist()
    gpus = workload.table.gpus.tolist()
    duration = workload.table.duration_s.tolist()
    rows = []
    for policy in ("fifo", "sjf"):
        for backfill in (False, True):
            if policy == "fifo":
                make: Callable[[], Scheduler] = lambda: FIFO(backfill=backfill)  # noqa: B023, E731
                key: Callable[[int], tuple[Any, ...]] = lambda i: (submit[i], i)  # noqa: E731
            else:
                make = lambda: SRTFEst(preemptive=False, backfill=backfill)  # noqa: B023, E731
                key = lambda i: (duration[i], submit[i], i)  # noqa: E731
            lean_s, evalstop_s = [], []
            for _ in range(repeats):
                cpu0 = time.process_time()
                lean = lean_starts(submit, gpus, duration, total_gpus, key, backfill)
                cpu1 = time.process_time()
                result = simulate(workload, make())
                cpu2 = time.process_time()
                lean_s.append(cpu1 - cpu0)
                evalstop_s.append(cpu2 - cpu1)
            rows.append({
                "policy": policy, "backfill": backfill, "repeats": repeats,
                "lean_cpu_s": min(lean_s), "evalstop_cpu_s": min(evalstop_s),
                "ratio": min(evalstop_s) / min(lean_s),
                "ratio_median": float(np.median(np.array(evalstop_s) / np.array(lean_s))),
                "starts_match": result.columns["start_s"].tolist() == lean,
                "queued": int(np.sum(result.columns["start_s"] > result.columns["arrival_s"])),
            })
    return rows


def overload_run(n_jobs: int, total_gpus: int, load: float, policy: str, seed: int) -> dict[str, Any]:
    from evalstop.schedulers import LAS, SRTFEst
    from evalstop.sim.cluster import simulate
    from evalstop.workloads import PRESETS, generate

    config = PRESETS["paper"].with_(n_jobs=n_jobs, total_gpus=total_gpus, offered_load=load)
    workload = generate(config, seed)
    cpu0 = time.process_time()
    result = simulate(workload, SRTFEst() if policy == "srtf" else LAS())
    return {
        "n_jobs": n_jobs, "total_gpus": total_gpus, "load": load, "policy": policy,
        "simulate_cpu_s": time.process_time() - cpu0,
        "n_preemptions": int(result.columns["n_preemptions"].sum()),
    }


def overload_section(sizes: Sequence[int], total_gpus: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for load in (1.2, 1.5):
        for policy in ("srtf", "las"):
            runs = [_fastest_child(n, total_gpus, seed, load, policy) for n in sizes]
            for small, big in itertools.pairwise(runs):
                exponent = math.log(big["simulate_cpu_s"] / small["simulate_cpu_s"]) / math.log(
                    big["n_jobs"] / small["n_jobs"]
                )
                rows.append({**big, "from_jobs": small["n_jobs"], "from_cpu_s": small["simulate_cpu_s"],
                             "exponent": exponent})
    return rows


def _fastest_child(n_jobs: int, total_gpus: int, seed: int, load: float, policy: str) -> dict[str, Any]:
    """The fastest of OVERLOAD_REPEATS runs, each in a fresh process (as the queue section, so a
    burst of load on a shared machine does not make one size look slow)."""
    runs = [_child("overload", n_jobs, total_gpus, seed, load=load, policy=policy)
            for _ in range(OVERLOAD_REPEATS)]
    return min(runs, key=lambda r: float(r["simulate_cpu_s"]))


def _child(section: str, n_jobs: int, total_gpus: int, seed: int, **extra: Any) -> dict[str, Any]:
    """One measurement in a fresh interpreter: its memory and caches are its own."""
    argv = [sys.executable, __file__, "--child", f"{n_jobs}x{total_gpus}", "--section", section]
    argv += ["--seed", str(seed)]
    for name, value in extra.items():
        argv += [f"--{name}", str(value)]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return record


def format_sections(out: dict[str, Any]) -> str:
    lines = []
    if "queue" in out:
        repeats = out["queue"][0]["repeats"] if out["queue"] else 0
        lines.append(
            f"queue: burst trace, CPU s of evalstop vs the lean loop, fastest of {repeats} runs of"
            " each (target ratio <= 2)"
        )
        for r in out["queue"]:
            mode = "backfill" if r["backfill"] else "strict"
            lines.append(
                f"  {r['policy']:<5}{mode:<9} lean {r['lean_cpu_s']:6.3f}"
                f"  evalstop {r['evalstop_cpu_s']:6.3f}  ratio {r['ratio']:5.2f}"
                f" (median pair {r['ratio_median']:4.2f})  starts match: {r['starts_match']}"
                f"  queued jobs {r['queued']}"
            )
    if "overload" in out:
        lines.append(
            f"overload: simulate CPU s (fastest of {OVERLOAD_REPEATS} runs), cost exponent"
            " log(t2/t1)/log(n2/n1) (target <= 1.15)"
        )
        for r in out["overload"]:
            lines.append(
                f"  load {r['load']}  {r['policy']:<5}{r['from_jobs']:>7} -> {r['n_jobs']:<7} on "
                f"{r['total_gpus']} GPUs  {r['from_cpu_s']:7.2f} -> {r['simulate_cpu_s']:7.2f}"
                f"  exponent {r['exponent']:.2f}"
            )
    if "million" in out:
        r = out["million"]
        lines.append("million: EvalStop(SRTF-Est), generation + simulation (target <= 10 s, <= 1024 MiB)")
        lines.append(
            f"  {r['n_jobs']}x{r['total_gpus']}  generate {r['generate_s']:.2f} s  simulate "
            f"{r['simulate_s']:.2f} s  total {r['generate_s'] + r['simulate_s']:.2f} s wall  "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB"
        )
        cpu = r["generate_cpu_s"] + r["simulate_cpu_s"]
        lines.append(
            f"  CPU: generate {r['generate_cpu_s']:.2f} s  simulate {r['simulate_cpu_s']:.2f} s  "
            f"total {cpu:.2f} s (wall on a shared machine is longer; CPU is the one-core figure)"
        )
        lines.append(
            f"  machine speed: the lean loop on the same trace takes {r['lean_cpu_s']:.2f} s CPU; "
            f"simulate / lean = {r['simulate_cpu_s'] / r['lean_cpu_s']:.2f}; "
            f"{r['n_queued']} of {r['n_jobs']} jobs queued"
        )
    return "\n".join(lines)


def run_sections(sections: Sequence[str], quick: bool, seed: int) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    out: dict[str, Any] = {}
    if "queue" in sections:
        n, g = plan["queue"]
        out["queue"] = _child("queue", n, g, seed)["rows"]
    if "overload" in sections:
        sizes, g = plan["overload"]
        out["overload"] = overload_section(sizes, g, seed)
    if "million" in sections:
        n, g = plan["million"]
        out["million"] = _child("million", n, g, seed)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=parse_sizes, default=None,
                        help=f"per-size table instead of the sections (e.g. {DEFAULT_SIZES})")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run, not a measurement)")
    parser.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--load", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help=f"comma-separated subset of {', '.join(POLICIES)}")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--child", type=parse_size, help=argparse.SUPPRESS)
    parser.add_argument("--policy", choices=(*POLICIES, "las"), help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child is not None:
        n_jobs, total_gpus = args.child
        if args.section == "queue":
            record: dict[str, Any] = {"rows": queue_section(n_jobs, total_gpus, args.seed)}
        elif args.section == "overload":
            record = overload_run(n_jobs, total_gpus, args.load, args.policy, args.seed)
        elif args.section == "million":
            record = run_one(n_jobs, total_gpus, "evalstop(srtf)", args.seed, lean=True)
        else:
            record = run_one(n_jobs, total_gpus, args.policy, args.seed)
        print(json.dumps(record))
        return 0
    if args.sizes is None:
        sections = [s.strip() for s in args.sections.split(",") if s.strip()]
        unknown_sections = sorted(set(sections) - set(SECTIONS))
        if unknown_sections:
            raise SystemExit(f"unknown sections {unknown_sections}; choose from {list(SECTIONS)}")
        out = run_sections(sections, args.quick, args.seed)
        print(json.dumps(out, indent=2) if args.json else format_sections(out))
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
