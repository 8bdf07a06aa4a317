"""``evalstop reproduce --all | --study NAME | --list``: the named studies, then the report."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .spec import SpecError, load_studies

__all__ = ["claims_markdown", "run_studies"]


def run_studies(args: argparse.Namespace) -> int:
    if args.list:
        for study in load_studies():
            points = len(study.points)
            print(f"{study.name:24} {study.role:9} {study.seeds:3} seeds x {points} point(s)  {study.title}")
        return 0
    if args.seeds is not None and args.seeds < 2:
        print(f"--seeds must be >= 2 for paired statistics. Got {args.seeds} instead.", file=sys.stderr)
        return 2
    try:
        studies = load_studies(None if args.all else args.study)
    except SpecError as exc:
        print(f"evalstop reproduce: {exc}", file=sys.stderr)
        return 2
    from .suite import run_suite

    seeds = args.seeds if args.seeds is not None else (5 if args.quick else None)
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or None
    doc = run_suite(studies, args.out, seeds=seeds, workers=args.workers, ray_address=address,
                    cache_dir=args.cache, use_cache=not args.no_cache)
    print(claims_markdown(doc))
    tasks = doc["tasks"]
    print(f"\n{tasks['ran']} tasks run, {tasks['cached']} from the cache, {doc['wall_s']} s "
          f"({doc['backend']}); results in {args.out / 'results.json'}", file=sys.stderr)
    if not args.no_report:
        return _report(args)
    return 0


def _report(args: argparse.Namespace) -> int:
    try:
        from .report import write_report
    except ImportError as exc:  # matplotlib missing
        print(f"no report: {exc}; pip install 'evalstop[plot]' then run: evalstop report {args.out}",
              file=sys.stderr)
        return 0
    paths = write_report(args.out)
    print("report: " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def claims_markdown(doc: dict[str, Any]) -> str:
    """The claims table: the paper's value, ours with its CI, and the verdict."""
    lines = ["| study | claim | paper | ours (95 % CI) | tolerance | verdict |", "|---|---|---|---|---|---|"]
    for c in doc["claims"]:
        lines.append(f"| {c['study']} | {c['name']} | {c['paper']} | {c['ours']} | {c['tolerance']} | "
                     f"{'✅ ' if c['reproduced'] else '❌ '}{c['verdict']} |")
    for name, study in doc["studies"].items():
        if study["status"] != "ok":
            lines.append(f"| {name} | (skipped) | | | | {study['reason']} |")
    return "\n".join(lines)
