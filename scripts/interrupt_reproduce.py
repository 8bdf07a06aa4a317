"""Interrupt ``evalstop reproduce`` at random moments and count the runs that do not exit.

Each run starts ``evalstop reproduce --study noise --seeds 40 --workers 2`` in its own session,
waits for its first progress line, sleeps a random 0-1 s, sends SIGINT to the whole process
group (as a terminal's Ctrl-C does) and allows ``--timeout`` seconds for it to exit. A run that
does not is a hang: its pid is printed and it is killed. This found the exit hang that
``experiments.runner.sigint_deferred`` fixes (1 run in 40 before; docs/studies.md)::

    .venv/bin/python scripts/interrupt_reproduce.py 40
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time


def one_run(rng: random.Random, timeout: float) -> bool:
    """One interrupted run; True if it exited in time."""
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evalstop.cli", "reproduce", "--study", "noise", "--seeds", "40",
             "--out", out, "--workers", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert proc.stderr is not None
        while True:
            line = proc.stderr.readline()
            if not line or " tasks" in line or ("/" in line and "%)" in line):
                break
        time.sleep(rng.uniform(0.0, 1.0))
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            print(f"hang: pid {proc.pid} did not exit within {timeout:g} s of SIGINT", flush=True)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", type=int, nargs="?", default=40)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a run may take to exit after SIGINT")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    hangs = sum(not one_run(rng, args.timeout) for _ in range(args.runs))
    print(f"{hangs} of {args.runs} interrupted runs did not exit within {args.timeout:g} s")
    return 1 if hangs else 0


if __name__ == "__main__":
    raise SystemExit(main())
