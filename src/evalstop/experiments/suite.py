"""``evalstop reproduce --all``: every study, one results directory.

Layout of ``OUT`` (the input of ``evalstop report OUT``):
- ``results.json``: per study the spec (points, policies), per-point summaries with 95 % CIs,
  paired comparisons vs the study's baseline, claim verdicts; at the top, every claim in one list;
- ``rows.jsonl``: one metrics row per (study, point, seed, policy);
- ``cache/``: one file per (point hash, seed, code version) unless another cache is given.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .analysis import analyse_study
from .spec import StudySpec
from .sweep import Cache, Progress, Row, Task, code_version, execute

__all__ = ["RESULTS_FILE", "ROWS_FILE", "cpu_seconds", "plan_tasks", "run_suite"]

RESULTS_FILE = "results.json"
ROWS_FILE = "rows.jsonl"


def run_suite(
    studies: Sequence[StudySpec],
    out_dir: Path,
    *,
    seeds: int | None = None,
    workers: int | None = None,
    ray_address: str | None = None,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Run (or read from the cache) every task of ``studies``; write and return the results."""
    started, cpu_started = time.perf_counter(), cpu_seconds()
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = Cache((cache_dir or out_dir / "cache") if use_cache else None)
    runnable, skipped = _split_runnable(studies)
    plan, tasks = plan_tasks(runnable, seeds)
    progress = Progress(len(tasks), "reproduce --all") if show_progress else None
    rows, counts = execute(tasks, cache, workers=workers, ray_address=ray_address, progress=progress)
    sim_s = time.perf_counter() - started
    results: dict[str, Any] = {}
    all_rows: list[Row] = []
    for study in runnable:
        by_point = []
        for i, point in enumerate(study.points):
            key = point.key()
            point_rows = [dict(r, study=study.name, point=i, seed=seed)
                          for seed in plan[study.name] for r in rows[(key, seed)]]
            by_point.append(point_rows)
            all_rows.extend(point_rows)
        results[study.name] = analyse_study(study, by_point, plan[study.name])
    for study, reason in skipped:
        results[study.name] = {"name": study.name, "title": study.title, "role": study.role,
                               "status": "skipped", "reason": reason, "claims": []}
    doc = {
        "evalstop_version": __version__, "code_version": code_version(),
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "backend": _backend(workers, ray_address),
        "seeds_override": seeds, "tasks": counts, "simulate_s": round(sim_s, 2),
        "cpu_s": round(cpu_seconds() - cpu_started, 2),
        "wall_s": round(time.perf_counter() - started, 2),
        "claims": [c for s in results.values() for c in s["claims"]],
        "studies": results,
    }
    _write(out_dir, doc, all_rows)
    return doc


def plan_tasks(studies: Sequence[StudySpec], seeds: int | None = None,
               ) -> tuple[dict[str, list[int]], list[Task]]:
    """Each study's seeds (``seeds``, else its own default) and its tasks; identical points of
    different studies give equal tasks, which run once."""
    plan = {s.name: list(range(1, (seeds or s.seeds) + 1)) for s in studies}
    return plan, [Task(p.key(), p, seed) for s in studies for p in s.points for seed in plan[s.name]]


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its finished child processes (the
    pool's workers once it has shut down); a Ray cluster's CPU is not counted."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _backend(workers: int | None, ray_address: str | None) -> str:
    if ray_address:
        return "ray"
    return "serial" if workers == 1 else f"process pool ({workers or os.cpu_count()} workers)"


def _split_runnable(studies: Sequence[StudySpec]) -> tuple[list[StudySpec], list[tuple[StudySpec, str]]]:
    """Studies that need the Philly trace are skipped, with the reason, when it is absent."""
    runnable, skipped = [], []
    for study in studies:
        trace = study.points[0].trace
        if trace is not None:
            try:
                trace.resolve()
            except FileNotFoundError as exc:
                skipped.append((study, str(exc)))
                continue
        runnable.append(study)
    return runnable, skipped


def _write(out_dir: Path, doc: dict[str, Any], rows: list[Row]) -> None:
    (out_dir / RESULTS_FILE).write_text(json.dumps(_clean(doc), indent=1, allow_nan=False))
    with (out_dir / ROWS_FILE).open("w") as f:
        for row in rows:
            f.write(json.dumps(_clean({k: v for k, v in row.items() if k != "jct_quantiles_s"})) + "\n")


def _clean(obj: Any) -> Any:
    """Strict JSON: nan/inf become None, numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.integer | np.floating):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
