"""Where one single-score ingest spends its time: N ingests in this process (the domain call, no
HTTP), timed, optionally under cProfile.

    .venv/bin/python bench/ingest_profile.py --db postgresql -n 2000            # wall and CPU per score
    .venv/bin/python bench/ingest_profile.py --db sqlite --no-group-commit --profile

CPU is timed in ``--blocks`` blocks and the median block reported (robust on a shared machine);
``--profile`` profiles by CPU time (``time.process_time``), not wall, and prints the calls per
score (a count that does not depend on the machine's load). ``--db postgresql`` starts a
throwaway PostgreSQL as ``bench/service_load.py`` does. CPU is this process's (the database
server's is not counted). ``--no-group-commit`` runs SQLite's write on
the calling thread, so that the profile sees it (with group commit it runs on the committer's).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from service_load import start_postgres

from evalstop.service import domain
from evalstop.service.score import ScoreIn
from evalstop.service.store import open_store


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("-n", type=int, default=2000, help="single-score ingests to time")
    p.add_argument("--blocks", type=int, default=10, help="timed in this many blocks (median reported)")
    p.add_argument("--profile", action="store_true",
                   help="print the heaviest calls by CPU time (cumulative and own)")
    p.add_argument("--no-group-commit", action="store_true")
    args = p.parse_args(argv)
    stop = None
    if args.db == "sqlite":
        url = f"sqlite:///{tempfile.mkdtemp()}/profile.db"
    else:
        url, stop, _ = start_postgres()
    store = open_store(url, group_commit=not args.no_group_commit)
    try:
        domain.create_tenant(store, "t")
        spec = domain.JobSpec(external_ref="e1", target="dryrun", detector="evalstop:k=1000000")
        job_id = domain.register_job(store, "t", spec)["id"]
        for step in range(200):  # warm up: caches, prepared statements
            domain.ingest_scores(store, job_id, "t", [ScoreIn(step=step, value=0.5)])
        profile = cProfile.Profile(time.process_time) if args.profile else None  # CPU, not wall
        size = max(args.n // args.blocks, 1)
        walls, cpus, systems = [], [], []
        first = 200
        for _ in range(args.blocks):
            t0, c0, s0 = time.perf_counter(), time.process_time(), os.times().system
            if profile is not None:
                profile.enable()
            for step in range(first, first + size):
                domain.ingest_scores(store, job_id, "t", [ScoreIn(step=step, value=0.5)])
            if profile is not None:
                profile.disable()
            walls.append((time.perf_counter() - t0) / size)
            cpus.append((time.process_time() - c0) / size)
            systems.append((os.times().system - s0) / size)
            first += size
        print(f"{args.db}: {size * args.blocks} single-score ingests in {args.blocks} blocks: wall "
              f"{1000 * statistics.median(walls):.3f} ms, CPU of this process "
              f"{1000 * statistics.median(cpus):.3f} ms per score (median block; least "
              f"{1000 * min(cpus):.3f} ms; in the kernel "
              f"{1000 * statistics.median(systems):.3f} ms); load {os.getloadavg()[0]:.1f}"
              + (" (under cProfile)" if profile is not None else ""))
        if profile is not None:
            stats = pstats.Stats(profile)
            print(f"{stats.total_calls / (size * args.blocks):.0f} Python function calls per score")  # type: ignore[attr-defined]
            stats.sort_stats("cumulative").print_stats(30)
            stats.sort_stats("tottime").print_stats(30)
    finally:
        store.dispose()
        if stop is not None:
            stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
