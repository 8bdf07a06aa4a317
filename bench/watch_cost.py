"""What ``evalstop watch`` costs: detection-to-SIGTERM latency and idle CPU on a big event file.

A TensorBoard event file of ``--scalars`` scalars (default 100,000: one eval tag every 100th
scalar, rising, among training tags) is written once with PyTorch's ``SummaryWriter``. Each trial
copies it, starts ``evalstop watch --metric eval/score --detector evalstop:k=1 -- python child``
with the default poll (``--poll``, 1 s), waits until the sidecar has decided on the file's last
eval, waits a random fraction of a poll, then appends one lower eval (an ``Event`` record made by
the same writer) and notes the time. The child notes when SIGTERM reaches it. Latency = SIGTERM
time - write time. Then one more sidecar watches the file with nothing new for ``--idle-s``
seconds: its CPU time over that window (``/proc/<pid>/stat`` utime + stime) as % of one core.
Also printed: how long the sidecar takes from its start to its decision on the file's last
eval (``first_read_s``: Python start, imports, the child's start and the read), and how long the
reader alone takes to read the whole file in this process (``read_all_s``). CPU time is counted
in clock ticks (10 ms), so ``idle_cpu_s`` 0 means less than one tick over the window.

    .venv/bin/python bench/watch_cost.py                       # 20 trials, 30 s idle
    .venv/bin/python bench/watch_cost.py --trials 3 --idle-s 3 --scalars 2000 --json

Targets: latency p99 <= 2 s with the default poll; idle CPU <= 1 % of a core.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
CHILD = """import signal, sys, time
def term(signum, frame):
    open(sys.argv[1], "w").write(repr(time.time()))
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
while True:
    time.sleep(0.5)
"""
EVAL_EVERY = 100


def write_base(logdir: Path, n_scalars: int) -> tuple[Path, int]:
    """The event file and its last eval's step."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    step = 0
    for i in range(n_scalars):
        if i % EVAL_EVERY == EVAL_EVERY - 1:
            step += 1
            writer.add_scalar("eval/score", step / n_scalars, step)
        else:
            writer.add_scalar(f"train/metric_{i % 7}", float(i), step)
    writer.close()
    (path,) = list(logdir.glob("*tfevents*"))
    return path, step


def deciding_record(tmp: Path, step: int) -> bytes:
    """One event record with a lower eval at ``step``, as the writer frames it."""
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp / "deciding"
    writer = SummaryWriter(str(logdir))
    writer.flush()
    before = next(logdir.glob("*tfevents*")).stat().st_size
    writer.add_scalar("eval/score", -1.0, step)
    writer.close()
    return next(logdir.glob("*tfevents*")).read_bytes()[before:]


def start_sidecar(logdir: Path, child_file: Path, poll: float | None) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "evalstop.cli", "watch", "--metric", "eval/score",
            "--logdir", str(logdir), "--detector", "evalstop:k=1", "--grace", "5"]
    if poll is not None:
        argv += ["--poll", str(poll)]
    argv += ["--", sys.executable, "-c", CHILD, str(child_file)]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_step(proc: subprocess.Popen[str], step: int) -> float:
    """Read the sidecar's lines until its decision on ``step``; return when that was."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith(f"evalstop watch: step {step} "):
            return time.time()
    raise RuntimeError(f"the sidecar ended before deciding on step {step}")


def trial(base: Path, last: int, record: bytes, tmp: Path, poll: float | None,
          rng: random.Random) -> dict[str, float]:
    logdir = tmp / "trial"
    shutil.rmtree(logdir, ignore_errors=True)
    logdir.mkdir()
    path = logdir / base.name
    shutil.copy(base, path)
    child_file = tmp / "sigterm_at"
    child_file.unlink(missing_ok=True)
    start = time.time()
    proc = start_sidecar(logdir, child_file, poll)
    caught_up = wait_for_step(proc, last)
    time.sleep(rng.random() * (poll or 1.0))
    with path.open("ab") as fh:
        fh.write(record)
    written = time.time()
    assert proc.stderr is not None
    proc.stderr.read()
    code = proc.wait(timeout=60)
    if code != 3:
        raise RuntimeError(f"sidecar exit {code}, expected 3")
    return {"latency_s": float(child_file.read_text()) - written, "first_read_s": caught_up - start}


def read_all_s(base: Path) -> float:
    """Seconds ``TensorBoardReader`` takes to read the whole file once, in this process."""
    from evalstop.logs import TensorBoardReader

    start = time.perf_counter()
    records = TensorBoardReader(base.parent, "eval/score").read()
    elapsed = time.perf_counter() - start
    assert records, "no eval read"
    return elapsed


def idle_cpu(base: Path, last: int, tmp: Path, idle_s: float) -> float:
    logdir = tmp / "idle"
    logdir.mkdir()
    shutil.copy(base, logdir / base.name)
    proc = start_sidecar(logdir, tmp / "idle_sigterm", None)
    wait_for_step(proc, last)
    time.sleep(1.0)
    before = _cpu_s(proc.pid)
    time.sleep(idle_s)
    used = _cpu_s(proc.pid) - before
    proc.send_signal(signal.SIGINT)  # forwarded to the child, which ends; then the sidecar
    proc.wait(timeout=30)
    return used


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scalars", type=int, default=100_000)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--poll", type=float, default=None, help="the sidecar's --poll (default: its own)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.scalars < EVAL_EVERY or args.trials < 1 or args.idle_s <= 0:
        print(f"watch_cost: --scalars must be >= {EVAL_EVERY}, --trials >= 1, --idle-s > 0",
              file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="watch-cost-"))
    try:
        base, last = write_base(tmp / "base", args.scalars)
        file_mib = round(base.stat().st_size / 2**20, 2)
        record = deciding_record(tmp, last + 1)
        trials = [trial(base, last, record, tmp, args.poll, rng) for _ in range(args.trials)]
        cpu_s = idle_cpu(base, last, tmp, args.idle_s)
        read_s = read_all_s(base)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    latencies = [t["latency_s"] for t in trials]
    result: dict[str, Any] = {
        "scalars": args.scalars, "file_mib": file_mib,
        "trials": args.trials, "poll_s": args.poll or 1.0,
        "latency_p50_s": round(statistics.median(latencies), 3),
        "latency_p99_s": round(percentile(latencies, 0.99), 3), "latency_max_s": round(max(latencies), 3),
        "first_read_s": round(statistics.median(t["first_read_s"] for t in trials), 3),
        "read_all_s": round(read_s, 3), "idle_s": args.idle_s, "idle_cpu_s": round(cpu_s, 3),
        "idle_cpu_pct": round(100.0 * cpu_s / args.idle_s, 3),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:16s} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
