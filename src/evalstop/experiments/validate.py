"""``evalstop validate``: how well stopping rules do on the RL curve bank and real negatives.

For each rule, parameters are chosen on some bank families and scored on the others
(``holdout.cross_validate``); fixed specs are scored as given. The real supervised curves
(shipped in ``evalstop/data``) are never used for choosing: each rule's final spec
(chosen on every bank family) is run on them, and any stop there is a false positive.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..detectors import DEFAULT_SPEC, parse_spec
from ..workloads import PRESETS, generate
from ..workloads.bank import BankRun, build_bank, read_bank, shipped_trl_bank
from ..workloads.supervised import load_supervised
from . import cadence_policy, policy_choice
from .bank_sim import bank_policies, render_cluster, run_bank_seed, summarise
from .cadence import FRONTIER_GRID, bank_at, cases_of, default_check, frontier, held_out_choice, render_check
from .holdout import (
    Case,
    HeldOut,
    Outcome,
    cross_validate,
    expand_grid,
    family_folds,
    metrics,
    objective,
    outcomes,
)
from .stats import rate_cell

#: rule (spec name, maybe with fixed parameters) -> parameter grid searched on training families
GRIDS: dict[str, dict[str, list[Any]]] = {
    "evalstop": {"k": [1, 2, 3, 4], "against": ["previous", "best"], "min_delta": [0.0, 0.01, 0.02, 0.05]},
    "patience": {"patience": [2, 3, 5, 8], "min_delta": [0.0, 0.01, 0.02, 0.05]},
    "cusum": {"threshold": [3.0, 5.0, 8.0, 12.0], "drift": [1.0, 2.0, 3.0], "n_warmup_evals": [3, 5]},
    "mann-kendall": {
        "alpha": [0.001, 0.01, 0.05], "min_window": [4, 5, 6, 8], "min_delta": [0.0, 0.01, 0.02]
    },
    "noise-aware": {"z": [2.0, 2.5, 3.0, 4.0], "k": [1, 2, 3], "n_warmup_evals": [3, 5]},
    "paired": {"alpha": [0.001, 0.01, 0.05], "k": [1, 2, 3], "min_delta": [0.0, 0.01, 0.02]},
    "fixed-progress": {"at": [0.5, 0.65, 0.8]},
}

#: specs scored as given (no tuning): each rule's defaults and the paper preset
FIXED = (
    DEFAULT_SPEC, "evalstop", "evalstop:k=2,against=best", "patience", "cusum", "mann-kendall",
    "noise-aware", "paired", "fixed-progress", "never",
)

SYNTHETIC_JOBS = 1500

#: Candidates for the one default, chosen with families held out at every cadence at once.
DEFAULT_CANDIDATES: dict[str, dict[str, list[Any]]] = {
    "cusum": {"threshold": [2.0, 3.0, 4.0, 5.0], "drift": [1.5, 2.0, 2.5, 3.0], "n_warmup_evals": [3, 4, 5]},
    "noise-aware": {"k": [1, 2], "z": [2.5, 3.0, 3.5, 4.0], "n_warmup_evals": [3, 4]},
}

#: Candidates for one default under dense, every:3 and adaptive cadence (leave one bank out).
POLICY_CANDIDATES = cadence_policy.policy_specs()

COLUMNS = (
    ("precision", "precision"), ("recall", "recall"), ("fpr", "FPR"), ("harmful", "harmful"),
    ("fpr_controls", "FPR controls"),
    ("mean_regret", "regret"), ("p90_regret", "p90 regret"), ("mean_delay", "delay"),
    ("compute_saved", "saved"), ("stopped_before_peak", "before peak"), ("supervised_fpr", "FPR supervised"),
)


def bank_cases(runs: Sequence[BankRun]) -> list[Case]:
    return [
        Case(r.job_id, r.family, r.truth.label, r.evals, r.truth.true_gold, r.truth.peak_index) for r in runs
    ]


def supervised_cases(root: Path | None = None) -> list[Case]:
    """Real curves as healthy cases; the observed (rescaled) curve stands in for true quality."""
    cases = []
    for curve in load_supervised(root):
        quality = tuple(ev.score for ev in curve.evals)
        peak = max(range(len(quality)), key=lambda i: quality[i] if math.isfinite(quality[i]) else -math.inf)
        cases.append(Case(curve.job_id, f"supervised:{curve.model}", "healthy", curve.evals, quality, peak))
    return cases


def synthetic_cases(preset: str, n_jobs: int, seed: int) -> list[Case]:
    """The RLHF jobs of a generated synthetic workload (what the paper preset watches)."""
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Valid presets: {', '.join(PRESETS)}.")
    workload = generate(PRESETS[preset].with_(n_jobs=n_jobs), seed)
    cases = []
    for job, truth in zip(workload.jobs, workload.truth, strict=True):
        if job.kind == "rlhf":
            quality = truth.true_at_evals
            peak = max(range(len(quality)), key=quality.__getitem__)
            label = "hacking" if truth.hacking else "healthy"
            cases.append(Case(str(job.job_id), f"synthetic:{preset}", label, job.evals, quality, peak))
    return cases


def validate(
    runs: Sequence[BankRun],
    supervised: Sequence[Case],
    rules: Sequence[str],
    fixed: Sequence[str],
    folds: int,
    fold_seed: int,
    synthetic_presets: Sequence[str] = (),
) -> dict[str, Any]:
    """The whole study as plain data (what ``--json`` prints)."""
    cases = bank_cases(runs)
    groups = family_folds([c.family for c in cases], folds, fold_seed)
    controls = [i for i, c in enumerate(cases) if c.family.startswith("control")]
    held_out, final = {}, {}
    for rule in rules:
        grid = expand_grid(rule, GRIDS.get(rule.partition(":")[0], {}))
        result: HeldOut = cross_validate(cases, grid, groups, rule)
        table = outcomes(grid, cases)
        best = max(grid, key=lambda s: objective(metrics(cases, table[s])))
        final[rule] = best
        row = _scored(best, result.results, cases, controls, supervised)
        held_out[rule] = {"metrics": row, "chosen_per_fold": result.chosen, "final_spec": best}
    fixed_rows = {}
    for spec, results in outcomes(fixed, cases).items():
        fixed_rows[spec] = _scored(spec, results, cases, controls, supervised)
    synthetic = {}
    for preset in synthetic_presets:
        synth = synthetic_cases(preset, SYNTHETIC_JOBS, seed=1)
        table = outcomes(fixed, synth)
        synthetic[preset] = {spec: metrics(synth, table[spec]) for spec in fixed}
    return {
        "n_runs": len(cases),
        "labels": {lab: sum(c.label == lab for c in cases) for lab in ("hacking", "healthy", "borderline")},
        "folds": groups,
        "n_supervised": len(supervised),
        "held_out": held_out,
        "fixed": fixed_rows,
        "synthetic": synthetic,
    }


def _scored(
    spec: str, results: Sequence[Outcome], cases: Sequence[Case], controls: Sequence[int],
    supervised: Sequence[Case],
) -> dict[str, float]:
    """``metrics`` of ``results``, with the FPR (and its counts) on the control families and on
    the real supervised curves (run with ``spec``)."""
    row = metrics(cases, results)
    control = metrics([cases[i] for i in controls], [results[i] for i in controls])
    row.update(fpr_controls=control["fpr"], fp_controls=control["fp"], n_controls=control["n_healthy"])
    real = metrics(supervised, outcomes([spec], supervised)[spec]) if supervised else {}
    row.update(supervised_fpr=real.get("fpr", math.nan), fp_supervised=real.get("fp", 0.0),
               n_supervised_healthy=real.get("n_healthy", 0.0))
    return row


#: rate -> (successes, trials) keys of its row; the table prints these with counts and a Wilson
#: interval (``stops``: true plus false stops).
RATE_COUNTS = {
    "precision": ("tp", "stops"), "recall": ("tp", "n_hacking"), "fpr": ("fp", "n_healthy"),
    "harmful": ("n_harmful", "n_healthy"), "fpr_controls": ("fp_controls", "n_controls"),
    "supervised_fpr": ("fp_supervised", "n_supervised_healthy"),
}


def render(study: Mapping[str, Any]) -> str:
    labels = study["labels"]
    head = "| rule | spec | " + " | ".join(title for _, title in COLUMNS) + " |"
    rule_line = "|---" * (len(COLUMNS) + 2) + "|"
    lines = [
        f"Bank: {study['n_runs']} runs ({labels['hacking']} hacking, {labels['healthy']} healthy, "
        f"{labels['borderline']} borderline); {study['n_supervised']} real supervised curves as negatives.",
        "",
        f"Held out: parameters chosen without the run's family ({len(study['folds'])} folds of families); "
        "spec = the final choice on all families (used for the supervised column).",
        "",
        head,
        rule_line,
    ]
    for rule, entry in study["held_out"].items():
        lines.append(_row(rule, entry["final_spec"], entry["metrics"]))
    lines += ["", "Fixed specs (as given, no tuning), all bank runs:", "", head, rule_line]
    for spec, row in study["fixed"].items():
        lines.append(_row(spec.partition(":")[0], spec, row))
    for preset, rows in study.get("synthetic", {}).items():
        lines += ["", f"Fixed specs on the RLHF jobs of the synthetic {preset!r} preset "
                  f"({SYNTHETIC_JOBS} jobs, seed 1):", "", head, rule_line]
        lines += [_row(spec.partition(":")[0], spec, row) for spec, row in rows.items()]
    return "\n".join(lines) + "\n"


def _row(rule: str, spec: str, row: Mapping[str, float]) -> str:
    counts = {**row, "stops": row.get("tp", 0.0) + row.get("fp", 0.0)}
    cells = [
        rate_cell(int(counts[RATE_COUNTS[key][0]]), int(counts[RATE_COUNTS[key][1]]))
        if key in RATE_COUNTS and RATE_COUNTS[key][1] in counts else _fmt(row.get(key, math.nan))
        for key, _ in COLUMNS
    ]
    return f"| {rule} | `{spec}` | " + " | ".join(cells) + " |"


def _fmt(value: float) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.3f}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--bank", type=Path, default=None, help="bank directory written by `evalstop bank`")
    source.add_argument("--runs-per-family", type=int, default=10, help="build a bank in memory (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the in-memory bank (default 0)")
    parser.add_argument("--rule", action="append", default=None, help=f"rule to tune (repeatable; default: "
                        f"{', '.join(GRIDS)})")
    parser.add_argument("--detector", action="append", default=None, help="fixed spec to score (repeatable)")
    parser.add_argument("--supervised", default=None,
                        help="directory of <model>/validation-*.csv curves, or 'none' "
                             "(default: the curves shipped with evalstop)")
    parser.add_argument("--folds", type=int, default=0,
                        help="family folds for held-out choice (default 0: leave one family out)")
    parser.add_argument("--fold-seed", type=int, default=0, help="seed of the family split (default 0)")
    parser.add_argument("--json", action="store_true", help="print the study as JSON")
    parser.add_argument("--trl-bank", default=None,
                        help="TRL GRPO runs added to the in-memory bank, or 'none' (default: shipped runs)")
    parser.add_argument("--noisy-bank", default=None,
                        help="noisy-eval TRL GRPO runs, a third bank for the cadence-policy study, or 'none' "
                             "(default: shipped runs)")
    parser.add_argument("--cadences", default="10,40",
                        help="evals per job at which the default is checked, or 'none' (default 10,40)")
    parser.add_argument("--default-spec", default=None,
                        help=f"spec checked as the default (default {DEFAULT_SPEC})")
    parser.add_argument("--policies", choices=("on", "off"), default="on",
                        help="also score the default under dense, every:3 and adaptive cadence, with the "
                             "leave-one-bank-out choice among POLICY_CANDIDATES (default on)")
    parser.add_argument("--search", action="store_true",
                        help="run the leave-one-bank-out search of the policy study even when "
                             "experiments/rule-search.toml records it for these banks (minutes)")
    parser.add_argument("--synthetic", action="append", default=[], metavar="PRESET",
                        help="also score the fixed specs on this synthetic preset's RLHF jobs (repeatable)")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help="also draw a run per family with the fixed specs' stops (needs matplotlib)")
    sim = parser.add_argument_group("cluster simulation with bank curves")
    sim.add_argument("--simulate", type=int, default=0, metavar="SEEDS",
                     help="also simulate this many seeds of a preset whose RLHF jobs replay bank runs")
    sim.add_argument("--preset", default="realistic", help="preset for --simulate (default realistic)")
    sim.add_argument("--sim-jobs", type=int, default=1000, help="jobs per simulated seed (default 1000)")
    sim.add_argument("--sim-detector", default=DEFAULT_SPEC,
                     help=f"rule compared with the paper's in --simulate (default {DEFAULT_SPEC})")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    try:
        trl = _load_trl(args.trl_bank)
        runs = read_bank(args.bank) if args.bank else build_bank(args.seed, args.runs_per_family) + trl
        supervised = _load_supervised(args.supervised)
        study = validate(runs, supervised, args.rule or list(GRIDS), args.detector or list(FIXED),
                         args.folds, args.fold_seed, args.synthetic)
        cadences = _cadences(args.cadences)
        if cadences:
            study["default"] = _default_study(args, cadences, trl, supervised)
        if args.policies == "on":
            study["policies"] = _policy_study(args, runs)
    except (OSError, ValueError) as exc:
        print(f"evalstop validate: error: {exc}", file=sys.stderr)
        return 2
    if args.simulate > 0:
        study["cluster"] = _simulate(runs, args)
    if args.plot is not None:
        from .bank_plot import plot_bank

        plot_bank(runs, args.detector or ["evalstop:k=2,against=best", "cusum"], args.plot)
    if args.json:
        print(json.dumps(study, indent=2, default=_json_default))
    else:
        print(render(study), end="")
        if "default" in study:
            print("\n" + render_check(study["default"]["check"], study["default"]["held_out"]), end="")
        if "policies" in study:
            print("\n" + cadence_policy.render(study["policies"]), end="")
        if "cluster" in study:
            print("\n" + render_cluster(study["cluster"], args.simulate, args.preset), end="")
        print(f"\n({time.perf_counter() - started:.1f} s)")
    return 0


def _policy_study(args: argparse.Namespace, runs: Sequence[BankRun]) -> dict[str, Any]:
    """The default under dense, every:3 and adaptive cadence on three banks, and the
    leave-one-bank-out choice among ``POLICY_CANDIDATES``: read from the shipped search result
    when it was made on these banks (``policy_choice``), searched otherwise or with ``--search``.
    With the shipped TRL runs, the TRL bank also has the validation-only runs."""
    noisy = [] if args.noisy_bank == "none" else (
        shipped_trl_bank(noisy=True) if args.noisy_bank is None else read_bank(Path(args.noisy_bank))
    )
    extra = policy_choice.validation_trl_bank() if args.trl_bank is None and args.bank is None else []
    cases = bank_cases([*runs, *extra, *noisy])
    choice = None if args.search else policy_choice.read_choice(cases, POLICY_CANDIDATES)
    if choice is None and not args.search and len(policy_choice.bank_digests(cases)) > 1:
        print(f"evalstop validate: {policy_choice.CHOICE_FILE.name} was not made on these banks: searching "
              f"{len(POLICY_CANDIDATES)} specs (minutes)", file=sys.stderr)
    return cadence_policy.study(args.default_spec or DEFAULT_SPEC, POLICY_CANDIDATES, cases, choice=choice)


def _default_study(
    args: argparse.Namespace, cadences: Sequence[int], trl: Sequence[BankRun], supervised: Sequence[Case]
) -> dict[str, Any]:
    """The default (or ``--default-spec``) at every cadence, and the held-out choice among
    ``DEFAULT_CANDIDATES`` (the numpy families rebuilt at each cadence, the TRL runs thinned)."""
    by_cadence = {c: cases_of(bank_at(c, args.seed, args.runs_per_family, trl)) for c in cadences}
    candidates = [s for rule, grid in DEFAULT_CANDIDATES.items() for s in expand_grid(rule, grid)]
    spec = args.default_spec or DEFAULT_SPEC
    check = default_check(spec, by_cadence, supervised)
    wide = [s for rule, grid in FRONTIER_GRID.items() for s in expand_grid(rule, grid)]
    check["frontier"] = {str(c): frontier(wide, cases) for c, cases in by_cadence.items()}
    return {
        "check": check,
        "held_out": held_out_choice(candidates, by_cadence),
    }


def _cadences(text: str) -> list[int]:
    if text.strip().lower() == "none":
        return []
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--cadences must be comma-separated ints or 'none'. Got {text!r}.") from None
    if any(v < 4 or v > 40 for v in values):
        raise ValueError(f"--cadences must be between 4 and 40 evals (the TRL runs have 40). Got {text!r}.")
    return values


def _load_trl(option: str | None) -> list[BankRun]:
    if option == "none":
        return []
    return shipped_trl_bank() if option is None else read_bank(Path(option))


def _simulate(runs: Sequence[BankRun], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    if args.preset not in PRESETS:
        raise ValueError(f"Unknown preset {args.preset!r}. Valid presets: {', '.join(PRESETS)}.")
    parse_spec(args.sim_detector)
    config = PRESETS[args.preset].with_(n_jobs=args.sim_jobs)
    rows = []
    for seed in range(args.simulate):
        rows += run_bank_seed(config, runs, bank_policies(args.sim_detector), seed)
    return summarise(rows)


def _load_supervised(option: str | None) -> list[Case]:
    if option == "none":
        return []
    cases = supervised_cases(None if option is None else Path(option))
    if not cases:
        where = "the packaged curves" if option is None else option
        raise ValueError(f"--supervised: no curve with at least 3 rows in {where} (pass --supervised none "
                         "to run without real negatives)")
    return cases


def _json_default(value: object) -> object:
    raise TypeError(f"not JSON serialisable: {value!r}")
