"""``evalstop reproduce``: the paper's headline table, ours beside the paper's.

Plain ``reproduce`` runs the ``headline`` study of specs/ (policies, workload and claims come
from there, so it and ``--all`` can never disagree); ``--all``/``--study`` run the suite."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._argtypes import int_in_range
from .analysis import analyse_study
from .legend import legend_lines
from .runner import run_seeds, stderr_progress
from .spec import StudySpec, load_studies

_LEGEND = ("precision", "recall", "FPR", "FPR healthy RLHF", "JCT", "wasted GPU-h", "GPU-h on hacking",
           "regret (hacking)", "[lo, hi]", "—")
#: The study each ``--preset`` runs (src/evalstop/experiments/specs/).
HEADLINE_STUDIES = {"paper": "headline", "realistic": "headline-realistic"}
#: The most seeds ``--seeds`` takes: the headline at 1,000 seeds is about 4 min of CPU time, and
#: ``--all`` (1,000 seeds for every study) about 50 times its default.
MAX_SEEDS = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", default=None,
                        type=int_in_range(2, MAX_SEEDS, "paired statistics need two; 1,000 is about 4 min of "
                                          "CPU for the headline, an hour for --all"),
                        help=f"number of seeds, 2 to {MAX_SEEDS} (default 30; --all/--study: each study's "
                        "own default); progress on a terminal, elsewhere a line every 10 s")
    parser.add_argument("--quick", action="store_true",
                        help="8 seeds of 1,000 jobs: a few seconds (with --all/--study: 5 seeds per study); "
                        "not with --seeds")
    parser.add_argument("--preset", default=None, choices=sorted(HEADLINE_STUDIES),
                        help="workload preset of the headline: runs the 'headline' (default: paper) or "
                        "'headline-realistic' study; not with --all/--study, whose studies name their own")
    parser.add_argument("--workers", type=int_in_range(1), default=None,
                        help="processes, >= 1 (default: one per core)")
    parser.add_argument("--json", action="store_true", help="print a machine-readable result")
    studies = parser.add_argument_group("studies (every claim of the paper; see docs/studies.md)")
    studies.add_argument("--all", action="store_true", help="run every named study; write results, report")
    studies.add_argument("--study", action="append", metavar="NAME", help="run this study (repeatable)")
    studies.add_argument("--list", action="store_true", help="list the named studies and exit")
    studies.add_argument("--out", type=Path, default=None,
                         help="results directory (default results; --study writes to OUT/study-NAME)")
    studies.add_argument("--ray-address", default=None,
                         help="run tasks on this Ray cluster (default: $RAY_ADDRESS, else local processes)")
    studies.add_argument("--cache", type=Path, default=None, help="cache directory (default OUT/cache)")
    studies.add_argument("--no-cache", action="store_true", help="recompute every task")
    studies.add_argument("--no-report", action="store_true", help="write results only, no report")
    parser.set_defaults(run=run)


#: Options of --all/--study only, and their value when not given.
STUDY_ONLY = {"out": None, "ray_address": None, "cache": None, "no_cache": False, "no_report": False}


def run(args: argparse.Namespace) -> int:
    if args.quick and args.seeds is not None:
        print("evalstop reproduce: --quick sets the seeds (8, or 5 per study with --all/--study): give "
              "--quick or --seeds, not both", file=sys.stderr)
        return 2
    if args.all or args.study or args.list:
        from .suite_cmd import run_studies

        if args.preset is not None:
            print("evalstop reproduce: --preset chooses the headline's workload; with --all/--study each "
                  "study names its own (the realistic ones end in '-realistic': see --list)", file=sys.stderr)
            return 2
        args.out = Path("results") if args.out is None else args.out
        return run_studies(args)
    given = [name for name, unset in STUDY_ONLY.items() if getattr(args, name) != unset]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        print(f"evalstop reproduce: {flags}: for --all/--study only; the headline runs in local "
              "processes and prints its result (--json for all of it)", file=sys.stderr)
        return 2
    seeds = 30 if args.seeds is None else args.seeds
    study = headline_study(args.preset or "paper", n_jobs=1000 if args.quick else None)
    started = time.perf_counter()
    result = reproduce(study, range(1, (8 if args.quick else seeds) + 1), workers=args.workers)
    result["wall_s"] = round(time.perf_counter() - started, 2)
    result["preset"] = args.preset or "paper"
    if args.json:
        print(json.dumps(result, indent=1, default=_json_default))
    else:
        print(render(result))
    return 0


def headline_study(preset: str = "paper", n_jobs: int | None = None) -> StudySpec:
    """The headline study for ``preset`` (its spec in specs/), optionally with fewer jobs."""
    study = load_studies([HEADLINE_STUDIES[preset]])[0]
    if n_jobs is None:
        return study
    points = tuple(replace(p, workload=p.workload.with_(n_jobs=n_jobs)) for p in study.points)
    return replace(study, points=points)


def reproduce(study: StudySpec, seeds: Sequence[int], workers: int | None = None) -> dict[str, Any]:
    """Run a one-point study on ``seeds`` and analyse it as ``--all`` would (same claims)."""
    (point,) = study.points
    rows = run_seeds(point.workload, point.policies, list(seeds), point.sim, workers=workers,
                     progress=stderr_progress("reproduce"))
    analysed = analyse_study(study, [rows], list(seeds))
    return {
        "study": study.name,
        "workload": asdict(point.workload),
        "seeds": list(seeds),
        "policies": [asdict(p) for p in point.policies],
        "summary": analysed["summary"][0],
        "comparisons_vs_baseline": analysed["comparisons"][0][study.treatment],
        "claims": analysed["claims"],
        "rows": rows,
    }


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {obj!r}")


def render(result: dict[str, Any]) -> str:
    """The human-readable report: per-policy table, then the claims with the paper's values."""
    lines = [
        f"EvalStop headline: preset {result['preset']!r}, {result['workload']['total_gpus']} GPUs, "
        f"{result['workload']['n_jobs']} jobs per seed, {len(result['seeds'])} seeds "
        f"(mean over seeds; {result['wall_s']} s)",
        "",
        "| policy | precision | recall | FPR | FPR healthy RLHF | JCT mean h | JCT p95 h | JCT p99 h "
        "| wasted GPU-h | GPU-h on hacking | regret (hacking) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, s in result["summary"].items():
        cells = [_pct(s["precision"]), _pct(s["recall"]), _pct(s["fpr"]), _pct(s["fpr_healthy_rlhf"]),
                 _hours(s["jct_mean_s"]), _hours(s["jct_p95_s"]), _hours(s["jct_p99_s"]),
                 _num(s["wasted_gpu_hours"], 0), _num(s["hacking_gpu_hours"], 0),
                 _num(s["mean_regret_hacking"], 3)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| claim | paper | ours (95 % CI) | tolerance | verdict |", "|---|---|---|---|---|"]
    for c in result["claims"]:
        lines.append(f"| {c['name']} | {c['paper']} | {c['ours']} | {c['tolerance']} | {c['verdict']} |")
    lines += ["", "Columns:", *legend_lines(_LEGEND, prefix="  ")]
    return "\n".join(lines)


def _pct(stat: dict[str, Any]) -> str:
    return "—" if stat["mean"] is None else f"{100 * stat['mean']:.1f} %"


def _hours(stat: dict[str, Any]) -> str:
    return "—" if stat["mean"] is None else f"{stat['mean'] / 3600:.2f}"


def _num(stat: dict[str, Any], digits: int) -> str:
    return "—" if stat["mean"] is None else f"{stat['mean']:.{digits}f}"


__all__ = ["MAX_SEEDS", "add_arguments", "headline_study", "render", "reproduce", "run"]
