"""Instructions the simulator's event loop executes, counted by valgrind's callgrind.

Seconds on a shared machine move by a third within an hour; instruction counts for the same
binary and input do not (PYTHONHASHSEED is pinned). So a change to the loop is judged here:
the workload is generated and the simulator set up outside the count, then only
``ClusterSim._run_events`` is counted (callgrind started with instrumentation off, switched on
and off around the loop with ``callgrind_control``). The default is the million section's case
(the paper preset, EvalStop over SRTF-Est, GPUs scaled with the jobs) at 30,000 jobs. With
``--generate`` it counts ``generate(config, seed)`` instead (the workload generator), and then
the training-loss matrix the event path reads (``DenseEvals.losses``), separately.

    python bench/sim_instructions.py                  # 30,000 jobs on 492 GPUs
    python bench/sim_instructions.py --jobs 100000
    python bench/sim_instructions.py --generate --jobs 100000

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


def count(pid: str, on: bool) -> None:
    """Switch callgrind's counting in process ``pid`` on or off."""
    switch = f"--instr={'on' if on else 'off'}"
    subprocess.run(["callgrind_control", switch, pid], check=True, capture_output=True)


def generation_in_this_process(n_jobs: int, seed: int, part: str) -> str:
    """Count only ``generate`` (part "generate") or only the loss matrix (part "loss")."""
    from evalstop.workloads import PRESETS, generate
    from evalstop.workloads.table import DenseEvals

    config = PRESETS["paper"].with_(n_jobs=n_jobs, total_gpus=max(1, round(16384 * n_jobs / 1_000_000)))
    generate(config.with_(n_jobs=100), seed).table.evals.row(0)  # every import and first call done
    pid = str(os.getpid())
    count(pid, part == "generate")
    workload = generate(config, seed)
    count(pid, part == "loss")
    evals = workload.table.evals
    assert isinstance(evals, DenseEvals)
    evals.losses(0, len(workload))
    count(pid, False)
    return ""


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
    count(pid, True)
    with cyclic_gc_paused():
        sim._run_events()
    count(pid, False)
    return sim._result().event_log_hash


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--generate", action="store_true", help="count the workload generator instead")
    parser.add_argument("--child", choices=("loop", "generate", "loss"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "loop":
        print(loop_in_this_process(args.jobs, args.seed))
        return 0
    if args.child:
        print(generation_in_this_process(args.jobs, args.seed, args.child))
        return 0
    if args.generate:
        for part in ("generate", "loss"):
            instructions = counted(part, args.jobs, args.seed)[0]
            print(f"{part}, {args.jobs} jobs (paper preset): {instructions:,} instructions, "
                  f"{instructions / args.jobs:,.0f} a job")
        return 0
    instructions, out = counted("loop", args.jobs, args.seed)
    print(f"event loop, {args.jobs} jobs (EvalStop(SRTF-Est), paper preset): {instructions:,} instructions, "
          f"{instructions / args.jobs:,.0f} a job; event-log hash {out.split()[-1][:16]}")
    return 0


def counted(part: str, n_jobs: int, seed: int) -> tuple[int, str]:
    """(instructions counted, the child's stdout) of a child run counting ``part``."""
    with tempfile.TemporaryDirectory() as tmp:
        argv_child = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={tmp}/out",
            sys.executable, __file__, "--child", part, "--jobs", str(n_jobs), "--seed", str(seed),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(argv_child, check=True, capture_output=True, text=True, env=env)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1)), done.stdout


if __name__ == "__main__":
    sys.exit(main())
