"""``evalstop reproduce``: the paper's headline table, ours beside the paper's."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..workloads import PRESETS, WorkloadConfig
from .claims import Claim, headline_claims
from .policies import HEADLINE_POLICIES, PolicySpec
from .runner import Row, run_seeds, stderr_progress
from .stats import mean_ci, paired_compare

BASELINE = "SRTF-Est"
TREATMENT = "EvalStop + SRTF-Est"
SUMMARY_METRICS = (
    "precision", "recall", "fpr", "fpr_healthy_rlhf", "jct_mean_s", "jct_p50_s", "jct_p95_s",
    "jct_p99_s", "wasted_gpu_hours", "hacking_gpu_hours", "mean_regret_hacking", "utilisation",
)
COMPARED = ("jct_mean_s", "jct_p95_s", "jct_p99_s", "wasted_gpu_hours", "hacking_gpu_hours")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, default=None,
                        help="number of seeds (default 30; with --all/--study: each study's own default)")
    parser.add_argument("--quick", action="store_true", help="8 seeds of 1,000 jobs: under a minute")
    parser.add_argument("--preset", default="paper", choices=sorted(PRESETS), help="workload preset")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: one per core)")
    parser.add_argument("--json", action="store_true", help="print a machine-readable result")
    studies = parser.add_argument_group("studies (every claim of the paper; see docs/studies.md)")
    studies.add_argument("--all", action="store_true", help="run every named study; write results, report")
    studies.add_argument("--study", action="append", metavar="NAME", help="run this study (repeatable)")
    studies.add_argument("--list", action="store_true", help="list the named studies and exit")
    studies.add_argument("--out", type=Path, default=Path("results"), help="results directory")
    studies.add_argument("--ray-address", default=None,
                         help="run tasks on this Ray cluster (default: $RAY_ADDRESS, else local processes)")
    studies.add_argument("--cache", type=Path, default=None, help="cache directory (default OUT/cache)")
    studies.add_argument("--no-cache", action="store_true", help="recompute every task")
    studies.add_argument("--no-report", action="store_true", help="write results only, no report")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.all or args.study or args.list:
        from .suite_cmd import run_studies

        return run_studies(args)
    if args.seeds is None:
        args.seeds = 30
    if args.seeds < 2:
        print(f"--seeds must be >= 2 for paired statistics. Got {args.seeds} instead.", file=sys.stderr)
        return 2
    workload = PRESETS[args.preset]
    seeds = args.seeds
    if args.quick:
        workload, seeds = workload.with_(n_jobs=1000), 8
    started = time.perf_counter()
    result = reproduce(workload, range(1, seeds + 1), HEADLINE_POLICIES, workers=args.workers)
    result["wall_s"] = round(time.perf_counter() - started, 2)
    result["preset"] = args.preset
    if args.json:
        print(json.dumps(result, indent=1, default=_json_default))
    else:
        print(render(result))
    return 0


def reproduce(
    workload: WorkloadConfig, seeds: Sequence[int], policies: Sequence[PolicySpec], workers: int | None = None
) -> dict[str, Any]:
    rows = run_seeds(workload, policies, list(seeds), workers=workers, progress=stderr_progress("reproduce"))
    summary = {p.label: _summarise([r for r in rows if r["policy"] == p.label]) for p in policies}
    comparisons = {
        metric: paired_compare(_series(rows, BASELINE, metric), _series(rows, TREATMENT, metric),
                               n_boot=5000).as_dict()
        for metric in COMPARED
    }
    claims = headline_claims(summary, comparisons)
    return {
        "workload": asdict(workload),
        "seeds": list(seeds),
        "policies": [asdict(p) for p in policies],
        "summary": summary,
        "comparisons_vs_srtf": comparisons,
        "claims": [asdict(c) for c in claims],
        "rows": rows,
    }


def _series(rows: list[Row], policy: str, metric: str) -> list[float]:
    return [float(r[metric]) for r in rows if r["policy"] == policy]


def _summarise(rows: list[Row]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for metric in SUMMARY_METRICS:
        values = [float(r[metric]) for r in rows if r[metric] is not None]
        if not values:
            out[metric] = {"mean": None, "lo": None, "hi": None, "n": 0}
            continue
        mean, lo, hi = mean_ci(values, n_boot=2000)
        out[metric] = {"mean": mean, "lo": _none(lo), "hi": _none(hi), "n": len(values)}
    return out


def _none(x: float) -> float | None:
    return None if math.isnan(x) else x


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
        "| wasted GPU-h | hacking GPU-h | regret (hacking) |",
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
    return "\n".join(lines)


def _pct(stat: dict[str, Any]) -> str:
    return "—" if stat["mean"] is None else f"{100 * stat['mean']:.1f} %"


def _hours(stat: dict[str, Any]) -> str:
    return "—" if stat["mean"] is None else f"{stat['mean'] / 3600:.2f}"


def _num(stat: dict[str, Any], digits: int) -> str:
    return "—" if stat["mean"] is None else f"{stat['mean']:.{digits}f}"


__all__ = ["Claim", "add_arguments", "render", "reproduce", "run"]
