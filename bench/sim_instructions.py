"""Instructions the simulator's event loop executes, counted by valgrind's callgrind.

Seconds on a shared machine move by a third within an hour; instruction counts for the same
binary and input do not (PYTHONHASHSEED is pinned). So a change to the loop is judged here:
the workload is generated and the simulator set up outside the count, then only
``ClusterSim._run_events`` is counted (callgrind started with instrumentation off, switched on
and off around the loop with ``callgrind_control``). The default is the million section's case
(the paper preset, EvalStop over SRTF-Est, GPUs scaled with the jobs) at 30,000 jobs.

    python bench/sim_instructions.py                  # 30,000 jobs on 492 GPUs
    python bench/sim_instructions.py --jobs 100000

It needs valgrind (Debian's package). It prints the loop's instructions, per job, and the
event-log hash (equal hashes: the change kept the run identical).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence


def loop_in_this_process(n_jobs: int, seed: int) -> str:
    """Set up the run, count only the loop (callgrind_control), return the event-log hash."""
    from evalstop._gc import cyclic_gc_paused
    from evalstop.detectors import KDeclines
    from evalstop.schedulers import EvalStop, SRTFEst
    from evalstop.sim.cluster import ClusterSim
    from evalstop.workloads import PRESETS, generate

    total_gpus = max(1, round(16384 * n_jobs / 1_000_000))
    workload = generate(PRESETS["paper"].with_(n_jobs=n_jobs, total_gpus=total_gpus), seed)
    sim = ClusterSim(workload, EvalStop(SRTFEst(), KDeclines(against="best")))
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "--instr=on", pid], check=True, capture_output=True)
    with cyclic_gc_paused():
        sim._run_events()
    subprocess.run(["callgrind_control", "--instr=off", pid], check=True, capture_output=True)
    return sim._result().event_log_hash


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(loop_in_this_process(args.jobs, args.seed))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        argv_child = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={tmp}/out",
            sys.executable, __file__, "--child", "--jobs", str(args.jobs), "--seed", str(args.seed),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(argv_child, check=True, capture_output=True, text=True, env=env)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    instructions = int(found.group(1))
    print(f"event loop, {args.jobs} jobs (EvalStop(SRTF-Est), paper preset): {instructions:,} instructions, "
          f"{instructions / args.jobs:,.0f} a job; event-log hash {done.stdout.split()[-1][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
