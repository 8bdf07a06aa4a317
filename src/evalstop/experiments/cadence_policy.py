"""The default rule under eval cadence policies: dense, ``every:3`` and adaptive.

Each bank run is taken as dense (every eval the job could have run). Under a policy a rule sees
only the evals the policy asks for (``detectors.watch``); its stop and delivered checkpoint are
mapped back to the dense evals, so regret is measured on the same true curve at every cadence.
A run that never stops delivers its last dense eval's checkpoint (the job ran to the end).

*Detectable*: a hacking run counts in recall at a cadence only when its decline is
visible there: at least ``MIN_EVALS_AFTER`` evals after the true peak among those the sparse base
(``every:3`` for the adaptive policy) would run, and a drop of the watched score's expectation
from the peak to the lowest of those evals of at least ``MIN_DROP_SDS`` noise sds (the noise sd of
the dense watched curve, ``curve_sigma``). On both banks the watched eval is a small sample of
the gold metric, so its expectation is the true gold curve; reading the drop off the noisy
scores instead (best before minus lowest after) would call a flat run with noise "visible".
Both recalls are printed.

Selection is leave one bank out over three banks: the numpy bank, the TRL GRPO bank and the
noisy-eval TRL GRPO bank (48-prompt watched eval, transient collapses that recover). For each
bank the candidate whose *worst* shortfall over the three cadences is smallest on the other two
banks is applied to it; the final spec is chosen on all banks. The shortfall counts the adaptive
policy's evals beyond half the dense evals as a miss too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..detectors import Monitor, parse_cadence, parse_spec, watch
from ..detectors._noise import curve_sigma
from ..workloads.trl_runs import NOISY_FAMILIES
from .holdout import Case, expand_grid, harmful
from .stats import rate_cell

CADENCES = ("every:1", "every:3", "adaptive:every=3,dense=1")
#: The sparse base a cadence's detectable runs are judged at.
BASE_OF = {"every:1": "every:1", "every:3": "every:3", "adaptive:every=3,dense=1": "every:3"}
#: The candidates of the leave-one-bank-out choice (``evalstop validate``, ``rule_search``):
#: each scale in ``SCALES`` with every combination of ``POLICY_GRID`` (``policy_specs``).
#: Once ``per`` > 0 only ``threshold * per`` matters (docs/noise-rules.md), so the per-progress
#: scales fix ``threshold=1`` and vary ``per`` over the products the per-eval thresholds span.
SCALES = (
    *(f"threshold={t}" for t in (2.0, 3.0, 4.0, 6.0)),
    *(f"threshold=1.0,per={p}" for p in (0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.2, 1.6, 2.4)),
)
POLICY_GRID: dict[str, list[Any]] = {
    "drift": [1.0, 1.5, 2.0, 3.0],
    "sigma_from": ["all", "best"],
    "n_warmup_evals": [2],
    "warmup": [0.1, 0.2, 0.3],
    "elevate": ["g"],
    "hold": [0.0, 0.1, 0.15, 0.2],
}
MIN_EVALS_AFTER = 2
MIN_DROP_SDS = 2.0
#: The targets per cadence (recall over detectable runs; regret as a share of the rise).
#: ``eval_share``: evals run over the dense evals (the adaptive policy must use at most half).
TARGETS: dict[str, dict[str, float]] = {
    "every:1": {"precision": 0.95, "recall": 0.90, "fpr": 0.05, "regret_share": 1.0, "eval_share": 1.0},
    "every:3": {"precision": 0.95, "recall": 0.90, "fpr": 0.05, "regret_share": 0.08, "eval_share": 1.0},
    "adaptive:every=3,dense=1": {
        "precision": 0.95, "recall": 0.95, "fpr": 0.05, "regret_share": 0.08, "eval_share": 0.5,
    },
}


def policy_specs() -> list[str]:
    """Every candidate spec of the leave-one-bank-out choice, in a fixed order."""
    return [s for scale in SCALES for s in expand_grid(f"cusum:{scale}", POLICY_GRID)]


@dataclass(frozen=True)
class Run:
    """One case watched under one policy: dense indices used, stop and delivered (dense)."""

    used: int
    stop_index: int | None
    delivered: int


def bank_of(family: str) -> str:
    """The bank a family belongs to: ``numpy``, ``trl`` or ``trl-noisy``."""
    if family in NOISY_FAMILIES:
        return "trl-noisy"
    return "trl" if "trl" in family else "numpy"


def run_case(spec: str, cadence: str, case: Case) -> Run:
    monitor = Monitor(parse_spec(spec), parse_cadence(cadence))
    used = watch(monitor, case.evals)
    verdict = monitor.verdict
    last = len(case.evals) - 1
    if verdict.stop_index is None or verdict.best_index is None:
        return Run(len(used), None, last)
    return Run(len(used), used[verdict.stop_index], used[verdict.best_index])


def detectable(case: Case, cadence: str) -> bool:
    """Whether the hacking run's decline is visible at ``cadence``'s sparse base (module doc)."""
    n = parse_cadence(BASE_OF.get(cadence, cadence)).first
    after = [case.true_quality[i] for i in range(n - 1, len(case.evals), n) if i > case.peak_index]
    if len(after) < MIN_EVALS_AFTER:
        return False
    sigma = curve_sigma([ev.score for ev in case.evals if math.isfinite(ev.score)]) or 0.0
    return case.true_quality[case.peak_index] - min(after) >= MIN_DROP_SDS * sigma


def score(cases: Sequence[Case], runs: Sequence[Run], cadence: str) -> dict[str, float]:
    """P, R (all hacking runs and detectable ones), FPR, harmful false stops (over healthy
    runs, ``holdout.harmful``), regret share, evals used per run, and the counts of each rate."""
    hacking = [(c, r) for c, r in zip(cases, runs, strict=True) if c.label == "hacking"]
    healthy = [r for c, r in zip(cases, runs, strict=True) if c.label == "healthy"]
    seen = [(c, r) for c, r in hacking if detectable(c, cadence)]
    tp = sum(r.stop_index is not None for _, r in hacking)
    tp_seen = sum(r.stop_index is not None for _, r in seen)
    fp = sum(r.stop_index is not None for r in healthy)
    harm = sum(harmful(c, r.stop_index, r.delivered) for c, r in zip(cases, runs, strict=True))
    regret = [
        c.true_quality[c.peak_index] - c.true_quality[r.delivered] for c, r in zip(cases, runs, strict=True)
    ]
    rise = (
        float(np.mean([c.true_quality[c.peak_index] - c.true_quality[0] for c in cases]))
        if cases
        else math.nan
    )
    return {
        "n": float(len(cases)),
        "n_hacking": float(len(hacking)),
        "n_detectable": float(len(seen)),
        "n_healthy": float(len(healthy)),
        "tp": float(tp),
        "tp_detectable": float(tp_seen),
        "fp": float(fp),
        "n_harmful": float(harm),
        "precision": _ratio(tp, tp + fp),
        "recall_all": _ratio(tp, len(hacking)),
        "recall": _ratio(tp_seen, len(seen)),
        "fpr": _ratio(fp, len(healthy)),
        "harmful": _ratio(harm, len(healthy)),
        "regret_share": float(np.mean(regret)) / rise if regret and rise > 0 else math.nan,
        "evals": float(np.mean([r.used for r in runs])) if runs else math.nan,
        "dense_evals": float(np.mean([len(c.evals) for c in cases])) if cases else math.nan,
    }


def shortfall(row: Mapping[str, float], cadence: str) -> float:
    """Total shortfall from the cadence's targets (undefined metrics count as none)."""
    goal = TARGETS[cadence]
    gaps = [
        goal["precision"] - row["precision"],
        goal["recall"] - row["recall"],
        row["fpr"] - goal["fpr"],
        row["regret_share"] - goal["regret_share"],
        row["evals"] / row["dense_evals"] - goal["eval_share"],
    ]
    return sum(max(0.0, g) for g in gaps if math.isfinite(g))


#: The row of ``bank_rows`` that pools every bank's runs.
POOLED = "pooled"


def bank_rows(
    cases: Sequence[Case],
    runs: Mapping[str, Mapping[str, Sequence[Run]]],
    pick: Mapping[str, str],
    cadences: Sequence[str] = CADENCES,
) -> dict[str, dict[str, dict[str, float]]]:
    """``score`` per bank and cadence, each bank's runs by the spec ``pick`` gives it; with more
    than one bank, also ``POOLED``: every bank's runs scored together (counts add up)."""
    banks = sorted({bank_of(c.family) for c in cases})
    out: dict[str, dict[str, dict[str, float]]] = {}
    for bank in banks:
        idx = [i for i, c in enumerate(cases) if bank_of(c.family) == bank]
        sub = [cases[i] for i in idx]
        out[bank] = {c: score(sub, [runs[pick[bank]][c][i] for i in idx], c) for c in cadences}
    if len(banks) > 1:
        out[POOLED] = {
            c: score(cases, [runs[pick[bank_of(k.family)]][c][i] for i, k in enumerate(cases)], c)
            for c in cadences
        }
    return out


def table(
    specs: Sequence[str], cases: Sequence[Case], cadences: Sequence[str] = CADENCES
) -> dict[str, dict[str, list[Run]]]:
    return {spec: {c: [run_case(spec, c, case) for case in cases] for c in cadences} for spec in specs}


def choose(
    specs: Sequence[str],
    cases: Sequence[Case],
    runs: Mapping[str, Mapping[str, Sequence[Run]]],
    keep: set[str],
    cadences: Sequence[str] = CADENCES,
) -> str:
    """The spec whose worst shortfall over ``cadences`` on the banks in ``keep`` is smallest,
    each bank weighed alike (ties: the higher mean recall minus FPR)."""
    groups = [[i for i, c in enumerate(cases) if bank_of(c.family) == bank] for bank in sorted(keep)]

    def key(spec: str) -> tuple[float, float]:
        rows = [
            (c, score([cases[i] for i in idx], [runs[spec][c][i] for i in idx], c))
            for idx in groups if idx for c in cadences
        ]
        worst = max(shortfall(row, c) for c, row in rows)
        tie = float(np.mean([_finite(row["recall"]) - _finite(row["fpr"]) for _, row in rows]))
        return -worst, tie

    return max(specs, key=key)


def study(
    spec: str,
    candidates: Sequence[str],
    cases: Sequence[Case],
    cadences: Sequence[str] = CADENCES,
    choice: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``spec`` per bank and cadence, and the leave-one-bank-out choice among ``candidates``
    (none with fewer than two banks). ``choice`` (``{"chosen": {bank: spec}, "final": spec}``, a
    search already made on these banks: ``policy_choice.read_choice``) skips the search: only
    the specs it names are run."""
    banks = sorted({bank_of(c.family) for c in cases})
    candidates = candidates if len(banks) > 1 else []
    if choice is not None and candidates:
        picked = [*choice["chosen"].values(), choice["final"]]
        runs = table(list(dict.fromkeys([spec, *picked])), cases, cadences)
        chosen, final = dict(choice["chosen"]), str(choice["final"])
    else:
        runs = table(list(dict.fromkeys([spec, *candidates])), cases, cadences)
        chosen = {b: choose(candidates, cases, runs, set(banks) - {b}, cadences) for b in banks} \
            if candidates else {}
        final = choose(candidates, cases, runs, set(banks), cadences) if candidates else ""

    def rows(pick: Mapping[str, str]) -> dict[str, dict[str, dict[str, float]]]:
        return bank_rows(cases, runs, pick, cadences)

    report: dict[str, Any] = {
        "spec": spec,
        "cadences": list(cadences),
        "banks": rows(dict.fromkeys(banks, spec)),
    }
    if candidates:
        report["held_out"] = {
            "chosen": chosen,
            "banks": rows(chosen),
            "final": final,
            "searched": choice is None,
        }
    return report


#: (rate, title, successes, trials): each rate is printed with its counts and Wilson interval.
RATES = (
    ("precision", "P", "tp", "stops"),
    ("recall", "R det.", "tp_detectable", "n_detectable"),
    ("recall_all", "R all", "tp", "n_hacking"),
    ("fpr", "FPR", "fp", "n_healthy"),
    ("harmful", "harmful", "n_harmful", "n_healthy"),
)


def render(report: Mapping[str, Any]) -> str:
    """Markdown tables: the spec per bank and cadence, then the held-out choice."""
    lines = [
        f"`{report['spec']}` under each eval cadence (recall over detectable hacking runs "
        "and over all; harmful = false stops that delivered more than 5 % of the rise below the "
        "final checkpoint, over healthy runs; each rate with its counts and 95 % Wilson interval; "
        "regret = mean regret / mean rise; evals = evals run per job):",
        "",
    ]
    lines += _table(report["banks"])
    held = report.get("held_out")
    if held:
        picks = ", ".join(f"{b} <- `{s}`" for b, s in held["chosen"].items())
        lines += [
            "",
            f"Leave one bank out (each bank scored with the spec chosen on the other banks: {picks}); "
            f"chosen on all banks: `{held['final']}`"
            + ("" if held.get("searched", True) else
               " (the choice recorded in experiments/rule-search.toml for these banks and this grid; "
               "--search reruns it)") + ":",
            "",
        ]
        lines += _table(held["banks"])
    return "\n".join(lines) + "\n"


def _table(banks: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    titles = " | ".join(t for _, t, _, _ in RATES)
    head = f"| bank | cadence | hacking (det.) | healthy | {titles} | regret | evals | dense evals |"
    lines = [head, "|---" * (len(RATES) + 7) + "|"]
    for bank, by_cadence in banks.items():
        for cadence, row in by_cadence.items():
            counts = {**row, "stops": row["tp"] + row["fp"]}
            cells = " | ".join(rate_cell(int(counts[k]), int(counts[n])) for _, _, k, n in RATES)
            lines.append(
                f"| {bank} | {cadence} | {int(row['n_hacking'])} ({int(row['n_detectable'])}) | "
                f"{int(row['n_healthy'])} | {cells} | {_fmt(row['regret_share'], 3)} | "
                f"{_fmt(row['evals'], 1)} | {_fmt(row['dense_evals'], 1)} |"
            )
    return lines


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def _fmt(value: float, digits: int) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"
