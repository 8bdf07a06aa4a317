"""``evalstop simulate CONFIG.toml``: run one configuration and print its metrics."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from ..sim.cluster import SimConfig
from ..sim.metrics import metrics_table
from ..workloads import PRESETS, WorkloadConfig
from ..workloads.bank import BankRun, read_bank
from ..workloads.jobs_csv import TraceFiles
from ..workloads.model import check_shapes_fit
from .config_schema import SIMULATE, check_policies
from .legend import legend_lines
from .policies import PolicySpec
from .runner import run_seeds, stderr_progress

EXAMPLE = """\
seeds = [1, 2, 3]

[workload]          # a preset, then any WorkloadConfig field
preset = "paper"
n_jobs = 1000
offered_load = 0.7
# bank = "bank"     # RLHF jobs replay runs of this `evalstop bank` directory (relative to this file)
# trace = "jobs.csv" # your own jobs: job_id,submit_s,gpus,duration_s[,kind,tenant] (n_jobs ignored)
# curves = "curves.csv"      # their eval curves: job_id,step,score[,progress,loss,items] (replay format)
# curves_truth = "truth.csv" # optional: job_id,hacking[,true_gold] (an `evalstop bank` truth.csv)

[sim]
preempt_overhead_s = 120.0

[[policy]]
label = "SRTF-Est"
base = "srtf"

[[policy]]
label = "EvalStop + SRTF-Est"
base = "srtf"
detector = "evalstop:k=2,against=best"
watch = ["rlhf"]
"""



class ConfigError(ValueError):
    """A simulate config that names an unknown key or holds a bad value."""


class Config(NamedTuple):
    """A loaded simulate config. ``bank``: the runs RLHF jobs replay (None: generated curves)."""

    workload: WorkloadConfig
    sim: SimConfig
    policies: list[PolicySpec]
    seeds: list[int]
    bank: tuple[BankRun, ...] | None = None
    trace: TraceFiles | None = None  # a jobs.csv and its curves (workloads.jobs_csv), checked when loaded


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", type=Path, nargs="?", help="TOML file (see --example)")
    parser.add_argument("--json", action="store_true", help="print metric rows as JSON")
    parser.add_argument("--example", action="store_true", help="print an example config and exit")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.example:
        print(EXAMPLE, end="")
        return 0
    if args.config is None:
        print("evalstop simulate: a CONFIG.toml is required (try --example)", file=sys.stderr)
        return 2
    try:
        config = load_config(tomllib.loads(args.config.read_text()), base_dir=args.config.parent)
    except (OSError, tomllib.TOMLDecodeError, ConfigError, ValueError, TypeError) as exc:
        print(f"evalstop simulate: {args.config}: {exc}", file=sys.stderr)
        return 2
    refusal = memory_refusal(config)
    if refusal is not None:
        print(f"evalstop simulate: {args.config}: {refusal}", file=sys.stderr)
        return 2
    rows = run_seeds(config.workload, config.policies, config.seeds, config.sim,
                     progress=stderr_progress("simulate"), bank=config.bank, trace=config.trace)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(metrics_table_from_rows(rows))
    return 0


#: Peak memory of one seed's run, per generated job, and the process's own: measured with
#: ``ru_maxrss`` of ``evalstop simulate`` at 50,000 and 200,000 jobs and 6 policies (about 1,000
#: bytes a job over about 110 MiB), rounded up.
BYTES_PER_JOB = 1280
BASE_BYTES = 160 * 2**20


def memory_refusal(config: Config) -> str | None:
    """Why ``config`` would not fit in this machine's available memory (checked before anything
    is allocated), with the ``n_jobs`` that fits; None when it fits or the memory is unknown."""
    if config.trace is not None:  # the jobs come from a file that was read already
        return None
    at_once = min(len(config.seeds), os.cpu_count() or 1)  # seeds run in parallel processes
    n_jobs = config.workload.n_jobs
    need = at_once * (BASE_BYTES + BYTES_PER_JOB * n_jobs)
    have = available_memory_bytes()
    if have is None or need <= have:
        return None
    fits = max(0, (have // at_once - BASE_BYTES) // BYTES_PER_JOB)
    return (f"[workload] n_jobs = {n_jobs:,} needs about {_gib(need)} of memory ({at_once} seed(s) at "
            f"once, about {BYTES_PER_JOB:,} bytes a job); {_gib(have)} is available: n_jobs <= {fits:,} fits")


def available_memory_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (Linux), else the physical memory; None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB"


def load_config(doc: dict[str, Any], base_dir: Path | None = None) -> Config:
    """Validate a parsed config; a relative ``workload.bank``, ``trace``, ``curves`` or
    ``curves_truth`` is resolved against ``base_dir`` (the config file's directory; default:
    the working directory)."""
    check_policies(doc.get("policy"), ConfigError)  # first: its messages are the most specific
    SIMULATE.check(doc, ConfigError, "top level")
    workload_doc = dict(doc.get("workload", {}))
    bank = _load_bank(workload_doc.pop("bank", None), base_dir or Path("."))
    try:
        trace = TraceFiles.from_config(workload_doc, base_dir or Path("."), "workload.bank" if bank else "")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    preset = workload_doc.pop("preset", "paper")
    for key, value in workload_doc.items():
        if isinstance(value, list):
            workload_doc[key] = tuple(value)
    try:
        workload = PRESETS[preset].with_(**workload_doc)
        sim = SimConfig(**doc.get("sim", {}))
        if trace is None:
            check_shapes_fit(workload)  # sizes drawn from the shapes: they must fit the cluster
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if trace is not None:
        trace.check(workload.total_gpus)  # every row of every file is checked now, not mid-run
    policies = []
    for i, p in enumerate(doc["policy"]):
        try:
            policies.append(PolicySpec.from_doc(p))
        except ValueError as exc:
            raise ConfigError(f"[[policy]] #{i + 1}: {exc}") from None
        try:
            policies[-1].build()  # validate names and parameters now, not mid-run
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"[[policy]] #{i + 1} ({policies[-1].label}): {exc}") from None
    seeds = doc.get("seeds", [1])
    if not seeds or any(s < 0 for s in seeds):
        raise ConfigError(f"top level: 'seeds' must be a non-empty list of integers >= 0. "
                          f"Got {seeds!r} instead.")
    return Config(workload, sim, policies, seeds, bank, trace)


def _load_bank(value: Any, base_dir: Path) -> tuple[BankRun, ...] | None:
    """The runs of the bank directory ``value``; ConfigError naming the path when unusable."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"workload.bank must be a directory path (a string). Got {value!r} instead.")
    path = base_dir / value
    if not path.is_dir():
        raise ConfigError(f"workload.bank: {path} is not a directory (expected `evalstop bank --out` output)")
    try:
        runs = tuple(read_bank(path))
    except KeyError as exc:
        raise ConfigError(f"workload.bank: cannot read the bank in {path}: missing column {exc}") from None
    except (OSError, ValueError, IndexError) as exc:
        raise ConfigError(f"workload.bank: cannot read the bank in {path}: {exc}") from None
    if not any(r.truth.label in ("hacking", "healthy") for r in runs):
        raise ConfigError(f"workload.bank: {path} has no hacking or healthy run to replay")
    return runs


def metrics_table_from_rows(rows: list[dict[str, Any]]) -> str:
    """The runs' table; with timed evals (``[sim] eval_cost`` or a cadence) two more columns."""
    timed = any(r.get("evals_per_rlhf_job") is not None for r in rows)
    header = ("| policy | seed | precision | recall | FPR | JCT mean h | JCT p99 h | wasted GPU-h "
              "| regret (hacking) | utilisation |")
    rule = "|---|---|---|---|---|---|---|---|---|---|"
    if timed:
        header, rule = header + " evals per RLHF job | eval GPU-h |", rule + "---|---|"
    lines = [header, rule]
    for r in rows:
        cells = [_f(r["precision"], 100, 1, " %"), _f(r["recall"], 100, 1, " %"), _f(r["fpr"], 100, 1, " %"),
                 _f(r["jct_mean_s"], 1 / 3600, 2), _f(r["jct_p99_s"], 1 / 3600, 2),
                 _f(r["wasted_gpu_hours"], 1, 0), _f(r.get("mean_regret_hacking"), 1, 3),
                 _f(r["utilisation"], 100, 1, " %")]
        if timed:
            cells += [_f(r.get("evals_per_rlhf_job"), 1, 1), _f(r.get("eval_gpu_hours"), 1, 0)]
        lines.append(f"| {r['policy']} | {r['seed']} | " + " | ".join(cells) + " |")
    legend = _LEGEND + (("evals per RLHF job", "eval GPU-h") if timed else ())
    lines += ["", "Columns:", *legend_lines(legend, prefix="  "),
              "  utilisation: GPU-seconds in use (work, restore overhead and evals) / (GPUs x makespan)"]
    return "\n".join(lines)


_LEGEND: tuple[str, ...] = ("precision", "recall", "FPR", "JCT", "wasted GPU-h", "regret (hacking)", "—")


def _f(value: float | None, scale: float, digits: int, unit: str = "") -> str:
    return "—" if value is None else f"{value * scale:.{digits}f}{unit}"


__all__ = ["EXAMPLE", "Config", "ConfigError", "add_arguments", "available_memory_bytes", "load_config",
           "memory_refusal", "metrics_table", "run"]
