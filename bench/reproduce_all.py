"""How long `evalstop reproduce --all` takes at its default seeds, and where the time goes.

1. **Wall time.** Runs ``evalstop reproduce --all --workers N --no-cache`` (default N = 2, the
   target machine) in a fresh process into a temporary directory, and splits the wall time into
   simulation (the task pool), analysis (bootstrap CIs and paired tests) and the report
   (figures, Markdown, HTML).
   It also reports the CPU seconds the run used (its worker processes included): on a machine
   shared with other work the wall time stretches, the CPU time does not.
2. **Breakdown** (``--breakdown``): per study, the CPU seconds of one seed of every point, run
   serially in this process, times the study's seed count: which studies cost what. It is an
   estimate (one seed, one process), printed as shares of the total.

Target: every study in under 5 minutes on 2 cores.

    .venv/bin/python bench/reproduce_all.py                 # wall time on 2 workers
    .venv/bin/python bench/reproduce_all.py --breakdown     # plus the per-study estimate
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_S = 300.0


def wall(workers: int, seeds: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results"
        cmd = [sys.executable, "-m", "evalstop.cli", "reproduce", "--all", "--no-cache",
               "--workers", str(workers), "--out", str(out)]
        if seeds is not None:
            cmd += ["--seeds", str(seeds)]
        started, cpu_before = time.perf_counter(), _children_cpu_s()
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        total = time.perf_counter() - started
        cpu = _children_cpu_s() - cpu_before
        doc = json.loads((out / "results.json").read_text())
    return {"workers": workers, "total_s": round(total, 1), "cpu_s": round(cpu, 1),
            "load_avg_1min": round(os.getloadavg()[0], 1), "simulate_s": doc["simulate_s"],
            "analyse_s": round(doc["wall_s"] - doc["simulate_s"], 1),
            "report_and_startup_s": round(total - doc["wall_s"], 1), "tasks": doc["tasks"]["ran"],
            "claims_reproduced": sum(c["reproduced"] for c in doc["claims"]), "claims": len(doc["claims"])}


def _children_cpu_s() -> float:
    """User + system CPU seconds of every finished child (the pool's workers included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def breakdown() -> list[dict[str, Any]]:
    from evalstop.experiments.spec import load_studies
    from evalstop.experiments.sweep import run_point

    out: list[dict[str, Any]] = []
    for study in load_studies():
        if study.uses_trace:
            try:
                study.points[0].trace.resolve()  # type: ignore[union-attr]
            except FileNotFoundError:
                continue
        started = time.process_time()
        for point in study.points:
            run_point(point, 1)
        per_seed = time.process_time() - started
        out.append({"study": study.name, "points": len(study.points), "seeds": study.seeds,
                    "cpu_s_per_seed": round(per_seed, 2), "cpu_s_est": round(per_seed * study.seeds, 1)})
    total = sum(r["cpu_s_est"] for r in out)
    for r in out:
        r["share_pct"] = round(100 * r["cpu_s_est"] / total, 1)
    return sorted(out, key=lambda r: -r["cpu_s_est"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=None, help="override every study's seeds")
    parser.add_argument("--breakdown", action="store_true", help="also estimate the cost per study")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result: dict[str, Any] = {"wall": wall(args.workers, args.seeds)}
    if args.breakdown:
        result["breakdown"] = breakdown()
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    w = result["wall"]
    verdict = "within" if w["total_s"] <= TARGET_S else "OVER"
    print(f"reproduce --all on {w['workers']} workers: {w['total_s']} s ({verdict} the {TARGET_S:.0f} s "
          f"target); simulate {w['simulate_s']} s ({w['tasks']} tasks), analyse {w['analyse_s']} s, "
          f"report + start-up {w['report_and_startup_s']} s; {w['cpu_s']} CPU-s in all "
          f"(load average {w['load_avg_1min']}: other work on the machine stretches the wall time); "
          f"{w['claims_reproduced']}/{w['claims']} claims reproduced")
    for r in result.get("breakdown", []):
        print(f"  {r['study']:24} {r['points']:2} points x {r['seeds']:2} seeds  "
              f"~{r['cpu_s_est']:6.1f} CPU-s ({r['share_pct']:4.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
