"""How long one seed of each rewind-study arm takes to train on this machine.

Trains seeds of the rewind study (``evalstop rewind --train``'s runs: the base run and one run per
correction of ``rewind_runs.CORRECTIONS``) for each proxy family, after one warm-up run that is
not counted (a process's first GRPO run pays the imports and first-call costs), and prints, per
run, the wall and CPU seconds, the steps trained, the gold peak and the rule's events; then per
family the totals per seed. Single-threaded torch, as the study runs. The wall time depends on
the machine's load; the CPU time much less.

    .venv/bin/python bench/rewind_seed_timing.py              # seeds 1 and 2, both families
    .venv/bin/python bench/rewind_seed_timing.py --seeds 1 --proxy learned
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from evalstop.detectors import OnDetect
from evalstop.experiments.rewind_runs import CORRECTIONS, base_config, run_arm, seed_sequence
from evalstop.workloads.trl_runs import PROXIES, TrlConfig


def time_arm(config: TrlConfig, index: int, correction: str | None) -> tuple[float, float, str]:
    """(wall s, CPU s, a line) for one run of seed ``index``."""
    w0, c0 = time.perf_counter(), time.process_time()
    policy = None if correction is None else OnDetect("rewind", max_rewinds=1, correction=correction)
    run = run_arm(config, seed_sequence(0, index), policy)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    peak = max(run.gold)
    events = [(e["event"], e["step"]) for e in run.log]
    line = (f"wall {wall:.1f} s, CPU {cpu:.2f} s, {run.steps_trained} steps, gold peak {peak:.3f} at step "
            f"{run.steps[run.gold.index(peak)]}, last {run.gold[-1]:.3f}, events {events}")
    return wall, cpu, line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="seed indices (study seed 0)")
    parser.add_argument("--proxy", choices=PROXIES, nargs="+", default=list(PROXIES))
    args = parser.parse_args(argv)
    run_arm(TrlConfig().with_(**base_config("linear")), seed_sequence(9, 9), None)  # warm-up
    arms: dict[str, str | None] = {"base": None, **CORRECTIONS}
    for proxy in args.proxy:
        config = TrlConfig().with_(**base_config(proxy))
        for index in args.seeds:
            total = [0.0, 0.0]
            for arm, correction in arms.items():
                wall, cpu, line = time_arm(config, index, correction)
                total = [total[0] + wall, total[1] + cpu]
                print(f"{proxy} seed {index} {arm}: {line}", flush=True)
            print(f"{proxy} seed {index}, all {len(arms)} runs: wall {total[0]:.1f} s, CPU {total[1]:.1f} s",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
