"""``evalstop reproduce --all | --study NAME | --list``: the named studies, then the report."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .spec import SpecError, load_studies

__all__ = ["claims_markdown", "run_studies"]


def run_studies(args: argparse.Namespace) -> int:
    if args.list:
        for study in load_studies():
            points = len(study.points)
            print(f"{study.name:24} {study.role:9} {study.seeds:3} seeds x {points} point(s)  {study.title}")
        return 0
    try:
        studies = load_studies(None if args.all else args.study)
    except SpecError as exc:
        print(f"evalstop reproduce: {exc}", file=sys.stderr)
        return 2
    from .suite import run_suite

    seeds = args.seeds if args.seeds is not None else (5 if args.quick else None)
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or None
    out = study_dir(args.out, None if args.all else [s.name for s in studies])
    cache = args.cache or args.out / "cache"
    try:  # a folder that cannot be written is said now, in one line, not after the first task
        for folder in (out, cache):
            folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"evalstop reproduce: cannot write results to {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    doc = run_suite(studies, out, seeds=seeds, workers=args.workers, ray_address=address,
                    cache_dir=cache, use_cache=not args.no_cache)
    print(claims_markdown(doc))
    tasks = doc["tasks"]
    print(f"\n{tasks['ran']} tasks run, {tasks['cached']} from the cache, {doc['wall_s']} s "
          f"({doc['backend']}); results in {out / 'results.json'}", file=sys.stderr)
    if not args.no_report:
        return _report(out)
    return 0


def _report(out: Path) -> int:
    from .report import NO_FIGURES, have_matplotlib, write_report

    paths = write_report(out)
    if not have_matplotlib():
        print(NO_FIGURES, file=sys.stderr)
    print("report: " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def study_dir(out: Path, names: Sequence[str] | None) -> Path:
    """Where results go: ``OUT`` for ``--all``; ``OUT/study-NAME[+NAME...]`` for ``--study``, so
    that a partial run never overwrites the full report (both share the cache ``OUT/cache``)."""
    return out if names is None else out / ("study-" + "+".join(sorted(set(names))))


def claims_markdown(doc: dict[str, Any]) -> str:
    """The claims table: the paper's value, ours with its CI, and the verdict."""
    lines = ["| study | claim | paper | ours (95 % CI) | tolerance | verdict |", "|---|---|---|---|---|---|"]
    for c in doc["claims"]:
        lines.append(f"| {c['study']} | {c['name']} | {c['paper']} | {c['ours']} | {c['tolerance']} | "
                     f"{'✅ ' if c['reproduced'] else '❌ '}{c['verdict']} |")
    for name, study in doc["studies"].items():
        if study["status"] != "ok":
            lines.append(f"| {name} | (skipped) | | | | {study['reason']} |")
    lines += ["", "ours: our mean; [lo, hi]: bootstrap 95 % confidence interval over seeds; tolerance: how "
              "far from the paper's value still counts as reproduced."]
    return "\n".join(lines)
