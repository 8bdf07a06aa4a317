"""Search the default rule's parameters under eval cadence policies, leave one bank out.

``python -m evalstop.experiments.rule_search --cache DIR`` runs every candidate spec
(``cadence_policy.policy_specs()``) on every bank run at dense, ``every:3`` and adaptive cadence
(``cadence_policy.CADENCES``) and
caches each spec's runs in ``DIR`` (one JSON file per bank and spec, keyed by the bank's
content), so a rerun or a bigger grid only computes what is new. It then prints, for each bank,
the spec chosen on the *other* banks (``cadence_policy.choose``: smallest worst shortfall from
the targets over the three cadences) scored on that bank, the spec chosen on all banks, and
the given ``--spec`` (default ``DEFAULT_SPEC``) for comparison. Nothing is chosen in-sample:
each bank's row uses a spec that never saw it. ``--write-choice`` records the choice in
``experiments/rule-search.toml``, which ``evalstop validate`` reads instead of searching
(``policy_choice``). ``--misses`` also lists, per bank and cadence, the runs behind each
held-out row's shortfall: healthy runs stopped and detectable hacking runs missed;
``--curves JOB_ID ...`` prints the named runs' watched and true curves side by side instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from ..detectors import DEFAULT_SPEC
from ..detectors._noise import curve_sigma
from ..workloads.bank import build_bank, read_bank, shipped_trl_bank
from . import cadence_policy, policy_choice
from .cadence_policy import (
    CADENCES,
    MIN_DROP_SDS,
    Run,
    bank_of,
    bank_rows,
    choose,
    detectable,
    policy_specs,
    run_case,
)
from .holdout import Case
from .validate import bank_cases


def all_cases(noisy: str | None = None, runs_per_family: int = 10, seed: int = 0) -> list[Case]:
    """The three banks: numpy families, the TRL GRPO bank (shipped runs and the validation-only
    runs, ``policy_choice.validation_trl_bank``), the noisy-eval GRPO bank (shipped, or read
    from directory ``noisy``; ``"none"``: left out)."""
    if noisy == "none":
        extra = []
    else:
        extra = shipped_trl_bank(noisy=True) if noisy is None else read_bank(Path(noisy))
    trl = shipped_trl_bank() + policy_choice.validation_trl_bank()
    return bank_cases(build_bank(seed, runs_per_family) + trl + extra)


def with_item_stderr(case: Case) -> Case:
    """``case`` with each eval's stderr set to the sd of its per-prompt items over sqrt(n)."""
    evals = []
    for ev in case.evals:
        items = [x for x in getattr(ev, "items", ()) if math.isfinite(x)]
        n = len(items)
        if n > 1:
            mean = math.fsum(items) / n
            sd = math.sqrt(math.fsum((x - mean) ** 2 for x in items) / (n - 1))
            ev = dataclasses.replace(ev, stderr=sd / math.sqrt(n))
        evals.append(ev)
    return dataclasses.replace(case, evals=tuple(evals))


def _runs_of(args: tuple[str, Sequence[Case]]) -> dict[str, list[list[int | None]]]:
    spec, cases = args
    return {c: [[r.used, r.stop_index, r.delivered] for r in (run_case(spec, c, k) for k in cases)]
            for c in CADENCES}


def compute(
    specs: Sequence[str], cases: Sequence[Case], cache: Path, jobs: int = 1
) -> dict[str, dict[str, list[Run]]]:
    """Every spec's runs on ``cases`` (read from ``cache`` where there, written there otherwise)."""
    banks = sorted({bank_of(c.family) for c in cases})
    out: dict[str, dict[str, list[Run]]] = {s: {c: [] for c in CADENCES} for s in specs}
    for bank in banks:
        sub = [c for c in cases if bank_of(c.family) == bank]
        folder = cache / f"{bank}-{policy_choice.digest(sub)}"
        folder.mkdir(parents=True, exist_ok=True)
        path = {s: folder / (hashlib.sha256(s.encode()).hexdigest()[:16] + ".json") for s in specs}
        todo = [s for s in specs if not path[s].is_file()]
        if todo:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                results = pool.map(_runs_of, [(s, sub) for s in todo], chunksize=4)
                for spec, result in zip(todo, results, strict=True):
                    path[spec].write_text(json.dumps({"spec": spec, "runs": result}))
        for s in specs:
            stored = json.loads(path[s].read_text())["runs"]
            for c in CADENCES:
                out[s][c] += [Run(int(u), st, int(d)) for u, st, d in stored[c]]
    return out  # bank by bank: pass ``by_bank(cases)`` so that runs and cases line up


def by_bank(cases: Sequence[Case]) -> list[Case]:
    """``cases`` in the order ``compute`` returns runs: bank by bank (sorted), then as given."""
    banks = sorted({bank_of(c.family) for c in cases})
    return [c for b in banks for c in cases if bank_of(c.family) == b]


def held_out(
    spec: str, specs: Sequence[str], cases: Sequence[Case], runs: Mapping[str, Any]
) -> dict[str, Any]:
    banks = sorted({bank_of(c.family) for c in cases})
    chosen = {b: choose(specs, cases, runs, set(banks) - {b}) for b in banks}

    return {
        "spec": spec,
        "cadences": list(CADENCES),
        "banks": bank_rows(cases, runs, dict.fromkeys(banks, spec)),
        "held_out": {
            "chosen": chosen, "banks": bank_rows(cases, runs, chosen),
            "final": choose(specs, cases, runs, set(banks)),
            "searched": True,
        },
    }


def miss_rows(
    pick: Mapping[str, str], cases: Sequence[Case], runs: Mapping[str, Any]
) -> list[dict[str, str]]:
    """The runs that make each bank's shortfall under the spec ``pick`` gives it: healthy runs
    stopped (where), detectable hacking runs not stopped (their true peak, fall and the regret
    of the last checkpoint they deliver). One dict per run and cadence."""
    rows = []
    for cadence in CADENCES:
        for i, case in enumerate(cases):
            bank = bank_of(case.family)
            run: Run = runs[pick[bank]][cadence][i]
            quality, peak = case.true_quality, case.peak_index
            if case.label == "healthy" and run.stop_index is not None:
                did = f"stopped at progress {_progress(case, run.stop_index)}"
            elif case.label == "hacking" and run.stop_index is None and detectable(case, cadence):
                did = (f"not stopped: true peak at {_progress(case, peak)}, falls "
                       f"{quality[peak] - min(quality[peak:]):.3f}, delivers the last checkpoint "
                       f"({quality[peak] - quality[run.delivered]:.3f} under the peak)")
            else:
                continue
            rows.append({"bank": bank, "cadence": cadence, "run": case.job_id, "family": case.family,
                         "label": case.label, "did": did})
    return rows


def misses(pick: Mapping[str, str], cases: Sequence[Case], runs: Mapping[str, Any]) -> list[str]:
    """:func:`miss_rows` as a Markdown table."""
    lines = ["| bank | cadence | run | family | label | what the rule did |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['bank']} | {r['cadence']} | {r['run']} | {r['family']} | {r['label']} | {r['did']} |"
              for r in miss_rows(pick, cases, runs)]
    return lines


def curves(cases: Sequence[Case], job_ids: Sequence[str]) -> list[str]:
    """The watched score and the true (gold) quality of the named runs side by side, eval by
    eval, then per run its longest stretch of evals more than ``MIN_DROP_SDS`` noise sds
    (``curve_sigma`` of its watched curve) under the running best watched score."""
    by_id = {c.job_id: c for c in cases}
    missing = [j for j in job_ids if j not in by_id]
    if missing:
        raise ValueError(f"--curves: no bank run {missing[0]!r}")
    picked = [by_id[j] for j in job_ids]
    lines = ["| eval | " + " | ".join(f"{c.job_id} ({c.label}): watched / gold" for c in picked) + " |",
             "|---" * (len(picked) + 1) + "|"]
    for k in range(max(len(c.evals) for c in picked)):
        cells = [f"{c.evals[k].score:.3f} / {c.true_quality[k]:.3f}" if k < len(c.evals) else ""
                 for c in picked]
        lines.append(f"| {k + 1} | " + " | ".join(cells) + " |")
    lines.append("")
    for c in picked:
        lines.append(f"- {c.job_id}: {_longest_under(c)}")
    return lines


def _longest_under(case: Case) -> str:
    sigma = curve_sigma([ev.score for ev in case.evals if math.isfinite(ev.score)]) or 0.0
    best, start, longest = -math.inf, None, (0, 0)
    for k, ev in enumerate(case.evals):
        if math.isfinite(ev.score) and ev.score < best - MIN_DROP_SDS * sigma:
            start = k if start is None else start
            longest = max(longest, (k - start + 1, start), key=lambda x: x[0])
        else:
            start = None
        best = max(best, ev.score) if math.isfinite(ev.score) else best
    if not longest[0]:
        return f"never more than {MIN_DROP_SDS:g} sds (sd {sigma:.3f}) under its best"
    first, n = longest[1], longest[0]
    return (f"{n} evals in a row more than {MIN_DROP_SDS:g} sds (sd {sigma:.3f}) under its best, "
            f"from progress {_progress(case, first)} to {_progress(case, first + n - 1)}; true quality "
            f"ends {case.true_quality[case.peak_index] - case.true_quality[-1]:.3f} under its peak")


def _progress(case: Case, index: int) -> str:
    progress = case.evals[index].progress
    return f"{progress:.3f}" if progress is not None else f"eval {index + 1}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalstop.experiments.rule_search")
    parser.add_argument("--cache", type=Path, help="directory of cached runs (required unless --curves)")
    parser.add_argument("--spec", default=DEFAULT_SPEC, help=f"spec shown beside the choice ({DEFAULT_SPEC})")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--noisy-bank", default=None, help="noisy-eval bank directory, or none "
                        "(default: shipped)")
    parser.add_argument("--item-stderr", action="store_true",
                        help="give each eval the stderr of its per-prompt items (sd / sqrt(n))")
    parser.add_argument("--write-choice", action="store_true",
                        help="record the choice in experiments/rule-search.toml (read by evalstop validate)")
    parser.add_argument("--misses", action="store_true",
                        help="also list the runs each held-out row misses or stops wrongly")
    parser.add_argument("--curves", metavar="JOB_ID", nargs="+",
                        help="only print these bank runs' watched and true curves side by side")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.cache is None and not args.curves:
        parser.error("--cache: required (a directory for the cached runs)")
    cases = by_bank(all_cases(args.noisy_bank))
    if args.item_stderr:
        cases = [with_item_stderr(c) for c in cases]
    if args.curves:
        try:
            print("\n".join(curves(cases, args.curves)))
        except ValueError as exc:
            parser.error(str(exc))
        return 0
    candidates = policy_specs()
    specs = list(dict.fromkeys([args.spec, *candidates]))
    runs = compute(specs, cases, args.cache, args.jobs)
    report = held_out(args.spec, candidates, cases, runs)
    if args.write_choice:
        policy_choice.write_choice(report["held_out"], cases, candidates)
    if args.json:
        if args.misses:  # inside the JSON, so that the output stays one document
            report["misses"] = miss_rows(report["held_out"]["chosen"], cases, runs)
        print(json.dumps(report, indent=2))
        return 0
    print(cadence_policy.render(report), end="")
    if args.misses:
        print("\nThe runs behind each held-out row's shortfall:\n")
        print("\n".join(misses(report["held_out"]["chosen"], cases, runs)))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
