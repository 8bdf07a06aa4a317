"""``evalstop rewind``: rewind to the best checkpoint instead of stopping, on real TRL GRPO training.

    evalstop rewind                    # the table, from the shipped runs (no training)
    evalstop rewind --train --seeds 20 # train every run again (about 20 s of CPU a seed), then the table
    evalstop rewind --runs a.json.gz --runs b.json.gz  # several batches (one study seed each)

Training writes one JSON file per seed into ``--cache`` (a rerun resumes), then the gzipped set
that ships with the package with ``--write-shipped``. The arms and the measures are in
``rewind_study``; the training in ``rewind_runs``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from .._argtypes import int_in_range
from ..workloads import PRESETS
from ..workloads.trl_runs import PROXIES
from .rewind_platform import COMPARED, PostRewind, calibrate, platform_study
from .rewind_study import SHIPPED, analyse_families, headline
from .rewind_table import format_families

DEFAULT_CACHE = Path("results") / "rewind-grpo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train", action="store_true",
                        help="train the runs (else read the shipped ones); needs the 'hf' extra")
    parser.add_argument("--seeds", type=int_in_range(1), default=None,
                        help="with --train: seeds per arm (default 20)")
    parser.add_argument("--seed", type=int_in_range(0), default=None,
                        help="with --train: the study seed (default 0, the shipped runs' seed)")
    parser.add_argument("--jobs", type=int_in_range(1), default=None, help="with --train: training processes "
                        "(default 1)")
    parser.add_argument("--proxy", choices=PROXIES, default=None,
                        help="with --train: the proxy family, linear (default) or learned")
    parser.add_argument("--cache", type=Path, default=None,
                        help=f"with --train: per-seed files (default {DEFAULT_CACHE})")
    parser.add_argument("--runs", type=Path, action="append", default=None,
                        help="read the runs from this .json.gz (written by --train), not the shipped ones; "
                             "repeat for several batches (study seeds)")
    parser.add_argument("--write-shipped", action="store_true",
                        help="with --train: write the trained runs as package data")
    parser.add_argument("--plot", type=Path, default=None,
                        help="write the figure (PNG; needs the 'plot' extra)")
    parser.add_argument("--platform", type=int_in_range(0), default=0, metavar="SEEDS",
                        help="also simulate a cluster whose tenants rewind instead of stop, over SEEDS "
                             "seeds (paper preset, 1,000 jobs, 64 GPUs; the post-rewind model calibrated "
                             "on the runs)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.set_defaults(run=run)


#: Options that only training reads, and their value when not given.
TRAIN_ONLY = {"seeds": None, "seed": None, "jobs": None, "cache": None, "write_shipped": False, "proxy": None}


def run(args: argparse.Namespace) -> int:
    refusal = _option_refusal(args)
    if refusal:
        print(f"evalstop rewind: {refusal}", file=sys.stderr)
        return 2
    if args.train:
        data = train(0 if args.seed is None else args.seed, args.seeds or 20, args.jobs or 1,
                     args.cache or DEFAULT_CACHE, args.proxy or "linear")
        if args.write_shipped:
            write_runs([data], SHIPPED)
        batches = [data]
    else:
        batches = []
        for path in args.runs or [SHIPPED]:
            try:
                batches += read_runs(path)
            except (OSError, EOFError, ValueError) as exc:  # missing, not gzip, not JSON
                where = f"--runs {path}" if args.runs else f"the shipped runs {SHIPPED}"
                print(f"evalstop rewind: {where}: cannot read the runs: "
                      f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
                return 2
    try:
        families = analyse_families(batches)
    except ValueError as exc:  # batches of different designs
        print(f"evalstop rewind: --runs: {exc}", file=sys.stderr)
        return 2
    result = headline(families)
    out: dict[str, Any] = {"families": families}
    if args.platform > 0:
        out["platform"] = platform(result, args.platform)
    if args.plot is not None:
        from .rewind_figure import plot

        plot(result, args.plot)
    text = format_families(families)
    if "platform" in out:
        text += "\n\n" + format_platform(out["platform"])
    print(json.dumps(out, indent=1) if args.json else text)
    return 0


def _option_refusal(args: argparse.Namespace) -> str:
    """Options that would be ignored: the training ones without --train, --runs with it."""
    if args.train:
        return "--runs: reads recorded runs instead of training; not with --train" if args.runs else ""
    given = [name for name, unset in TRAIN_ONLY.items() if getattr(args, name) != unset]
    if not given:
        return ""
    flags = ", ".join("--" + name.replace("_", "-") for name in given)
    return (f"{flags}: for --train only (without it the table comes from the shipped runs, study "
            "seed 0, or from --runs)")


def platform(result: dict[str, Any], seeds: int) -> dict[str, Any]:
    """The platform study: stop vs rewind with each arm's calibrated post-rewind model, and the
    model's two extremes (never / always re-hacks) as its sensitivity."""
    models = {arm: calibrate(result, arm) for arm in result["corrections"]}
    models["never re-hacks, gain 0"] = PostRewind(rehack=0.0, gain=0.0)
    models["always re-hacks"] = PostRewind(rehack=1.0, gain=0.0)
    config = PRESETS["paper"].with_(n_jobs=1000)
    rows = platform_study(config, seeds, models)
    return {"seeds": seeds, "config": "paper preset, 1,000 jobs, 64 GPUs, SRTF-Est + the default rule",
            "models": {name: vars(m) for name, m in models.items()}, "rows": rows}


def format_platform(study: dict[str, Any]) -> str:
    lines = [f"Platform: {study['config']}, {study['seeds']} seeds (means)", "",
             "| policy | post-rewind model | rewound jobs | JCT mean h | JCT p95 h | GPU-h "
             "| RLHF quality delivered | RLHF quality per GPU-h | RLHF regret |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, row in study["rows"].items():
        key = name.removeprefix("rewind (").removesuffix(")")
        model = study["models"].get(key)
        desc = "—" if model is None else f"re-hack {model['rehack']:.2f}, gain {model['gain']:+.3f}"
        lines.append(f"| {name} | {desc} | {row['rewound_jobs']:.0f} | {row['jct_mean_h']:.2f} | "
                     f"{row['jct_p95_h']:.2f} | {row['gpu_hours']:.0f} | {row['rlhf_quality']:.4f} | "
                     f"{row['rlhf_quality_per_gpu_hour']:.5f} | {row['rlhf_regret']:.4f} |")
    compared = {name: row["vs_stop"] for name, row in study["rows"].items() if "vs_stop" in row}
    if compared:
        lines += ["", "Change against stop, paired by seed (relative change of the means, "
                  "bootstrap 95 % CI):", "",
                  "| policy | GPU-h | JCT mean | RLHF quality delivered | RLHF quality per GPU-h |",
                  "|---|---|---|---|---|"]
        for name, changes in compared.items():
            cells = [_change(changes[k]) for k in COMPARED]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _change(c: dict[str, Any]) -> str:
    rel, lo, hi = c["rel_change"], c["rel_change_ci_lo"], c["rel_change_ci_hi"]
    if rel is None or lo is None or hi is None:
        return "—"
    return f"{100 * rel:+.1f} % [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def train(study_seed: int, n_seeds: int, jobs: int, cache: Path, proxy: str = "linear") -> dict[str, Any]:
    """Train (or read back from ``cache``) seeds ``0..n_seeds-1`` of a proxy family; the runs as
    one dict. A cached seed without every arm of ``CORRECTIONS`` is trained again."""
    from .rewind_runs import CORRECTIONS, base_config, run_seed

    base = base_config(proxy)
    cache.mkdir(parents=True, exist_ok=True)
    files = [_seed_file(cache, study_seed, i, proxy) for i in range(n_seeds)]
    todo = [i for i in range(n_seeds) if not _complete(files[i], CORRECTIONS)]
    n = len(todo)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for index, result in zip(todo, pool.map(run_seed, [study_seed] * n, todo, [base] * n), strict=True):
            files[index].write_text(json.dumps(result))
            print(f"evalstop rewind: seed {index} done", file=sys.stderr)
    seeds = [json.loads(f.read_text()) for f in files]
    flag = "" if proxy == "linear" else f" --proxy {proxy}"
    return {"study_seed": study_seed, "base": base, "corrections": CORRECTIONS, "seeds": seeds,
            "command": f"evalstop rewind --train --seeds {n_seeds} --seed {study_seed}{flag}"}


def _seed_file(cache: Path, study_seed: int, index: int, proxy: str) -> Path:
    return cache / f"seed-{study_seed}-{index:03d}{'' if proxy == 'linear' else '-' + proxy}.json"


def _complete(path: Path, corrections: dict[str, str]) -> bool:
    return path.is_file() and set(corrections) <= set(json.loads(path.read_text()))


def write_runs(batches: list[dict[str, Any]], path: Path) -> None:
    """One batch as it is; several as ``{"batches": [...]}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(batches[0] if len(batches) == 1 else {"batches": batches}, f)


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The batches a file holds (gzipped JSON: the runs of one ``--train``, or ``{"batches": [...]}``);
    ValueError when it holds something else."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data: Any = json.load(f)
    batches = data.get("batches", [data]) if isinstance(data, dict) else None
    if not batches or not all(isinstance(b, dict) and isinstance(b.get("seeds"), list) for b in batches):
        raise ValueError("not the runs of `evalstop rewind --train` (no list of 'seeds')")
    return list(batches)
