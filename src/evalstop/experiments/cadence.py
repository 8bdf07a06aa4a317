"""Does one rule hold at every cadence? The default's check in ``evalstop validate``.

The bank is watched at each cadence in ``CADENCES`` (evals per job): the numpy families are
rebuilt with that many evals; the TRL families (recorded at 40 evals) are thinned to it
(``bank.at_cadence``), and every run is relabelled from its true gold at the evals kept. For a
spec the check reports, per cadence, precision, recall, FPR, regret as a share of the rise
(mean regret / mean true peak; gold is 0 at the initial policy), every family's row, the FPR on
the real supervised curves, and whether it stops a flat curve at a ceiling whose dip is
smaller than the spec's absolute floor (``min_delta``; 1e-5 when the rule declares none).

``held_out_choice`` picks one spec among candidates by leave-one-family-out: for each family,
the spec whose *worst* objective over the cadences is best on the other families is applied to
that family at every cadence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..detectors import Eval, parse_spec
from ..workloads.bank import BankRun, at_cadence, build_bank
from .holdout import Case, Outcome, metrics, objective, outcomes

CADENCES = (10, 40)
#: The targets the default must meet, at every cadence.
GOALS = {"precision": 0.95, "recall": 0.95, "fpr": 0.05, "regret_share": 0.05, "supervised_fpr": 0.05}
CEILING = 0.8
NO_FLOOR_DIP = 1e-5


def bank_at(cadence: int, seed: int, runs_per_family: int, trl: Sequence[BankRun]) -> list[BankRun]:
    return build_bank(seed, runs_per_family, n_evals=cadence) + [at_cadence(r, cadence) for r in trl]


def cases_of(runs: Sequence[BankRun]) -> list[Case]:
    return [
        Case(r.job_id, r.family, r.truth.label, r.evals, r.truth.true_gold, r.truth.peak_index) for r in runs
    ]


def scored(cases: Sequence[Case], results: Sequence[Outcome]) -> dict[str, float]:
    """``holdout.metrics`` plus ``regret_share``: mean regret / mean true peak."""
    row = metrics(cases, results)
    rise = float(np.mean([c.true_quality[c.peak_index] for c in cases])) if cases else math.nan
    row["regret_share"] = row["mean_regret"] / rise if rise > 0 else math.nan
    return row


def ceiling_curves(spec: str, n_evals: int) -> dict[str, list[Eval]]:
    """Flat at ``CEILING`` with a dip smaller than the spec's floor: once at the end, once in
    the middle, and a lasting step down."""
    floor = float(getattr(parse_spec(spec), "min_delta", 0.0) or 0.0)
    low = CEILING - (floor / 2 if floor > 0 else NO_FLOOR_DIP)
    mid = n_evals // 2
    levels = {
        "dip at the end": [CEILING] * (n_evals - 1) + [low],
        "dip in the middle": [CEILING] * mid + [low] + [CEILING] * (n_evals - mid - 1),
        "step down": [CEILING] * mid + [low] * (n_evals - mid),
    }
    return {
        name: [Eval(i + 1, x, progress=(i + 1) / n_evals) for i, x in enumerate(xs)]
        for name, xs in levels.items()
    }


def ceiling_stops(spec: str, cadences: Sequence[int] = CADENCES) -> list[str]:
    """The ceiling curves (with their cadence) on which ``spec`` stops; empty when it holds."""
    detector = parse_spec(spec)
    return [
        f"{name} ({n} evals)"
        for n in cadences
        for name, evals in ceiling_curves(spec, n).items()
        if detector.evaluate(evals).stop_index is not None
    ]


def default_check(
    spec: str, by_cadence: Mapping[int, Sequence[Case]], supervised: Sequence[Case]
) -> dict[str, Any]:
    """``spec`` on every cadence's bank (overall and per family), the supervised curves and the
    ceiling curves, with which goals it misses."""
    report: dict[str, Any] = {"spec": spec, "cadences": {}}
    sup = scored(supervised, outcomes([spec], supervised)[spec])["fpr"] if supervised else math.nan
    misses = []
    for cadence, cases in by_cadence.items():
        results = outcomes([spec], cases)[spec]
        overall = scored(cases, results)
        families: dict[str, dict[str, float]] = {}
        for family in sorted({c.family for c in cases}):
            idx = [i for i, c in enumerate(cases) if c.family == family]
            families[family] = scored([cases[i] for i in idx], [results[i] for i in idx])
        report["cadences"][str(cadence)] = {"overall": overall, "families": families}
        misses += [f"{key} at {cadence} evals" for key in _missed(overall)]
    report["supervised_fpr"] = sup
    if math.isfinite(sup) and sup > GOALS["supervised_fpr"]:
        misses.append("supervised FPR")
    report["ceiling_stops"] = ceiling_stops(spec, [int(c) for c in by_cadence])
    misses += [f"stops at the ceiling: {c}" for c in report["ceiling_stops"]]
    report["misses"] = misses
    return report


def _missed(row: Mapping[str, float]) -> list[str]:
    out = []
    for key in ("precision", "recall"):
        if math.isfinite(row[key]) and row[key] < GOALS[key]:
            out.append(key)
    for key in ("fpr", "regret_share"):
        if math.isfinite(row[key]) and row[key] > GOALS[key]:
            out.append(key)
    return out


#: A wide grid of the noise-scaled rules, for ``frontier``: what the best spec of these families
#: can reach at one cadence when tuned in-sample (an upper bound for the default, not a choice).
FRONTIER_GRID: dict[str, dict[str, list[Any]]] = {
    "cusum": {"threshold": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0], "drift": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0],
              "n_warmup_evals": [2, 3, 4, 5]},
    "noise-aware": {"k": [1, 2, 3], "z": [0.5, 1.0, 1.5, 2.0, 2.5], "n_warmup_evals": [3, 4, 5]},
    "mann-kendall": {"alpha": [0.05, 0.1, 0.2, 0.3], "min_window": [3, 4, 5, 6]},
}


def frontier(specs: Sequence[str], cases: Sequence[Case]) -> dict[str, Any]:
    """The best recall any of ``specs`` reaches on ``cases`` with precision and FPR within the
    goals, tuned on these very cases (in-sample, so an upper bound), and the spec that does."""
    table = outcomes(specs, cases)
    best: dict[str, Any] = {"recall": math.nan, "spec": None, "n_specs": len(specs)}
    for spec in specs:
        row = scored(cases, table[spec])
        if row["precision"] < GOALS["precision"] or row["fpr"] > GOALS["fpr"]:
            continue
        if best["spec"] is None or row["recall"] > best["recall"]:
            best.update(recall=row["recall"], precision=row["precision"], fpr=row["fpr"], spec=spec)
    return best


def held_out_choice(candidates: Sequence[str], by_cadence: Mapping[int, Sequence[Case]]) -> dict[str, Any]:
    """Leave one family out; choose by the worst objective over the cadences; score the held-out
    family at every cadence with the spec chosen without it. Also the final choice (all families)."""
    tables = {c: outcomes(candidates, cases) for c, cases in by_cadence.items()}
    families = sorted({case.family for cases in by_cadence.values() for case in cases})

    def worst(spec: str, keep: set[str]) -> float:
        values = []
        for c, cases in by_cadence.items():
            idx = [i for i, case in enumerate(cases) if case.family in keep]
            values.append(objective(metrics([cases[i] for i in idx], [tables[c][spec][i] for i in idx])))
        return min(values)

    def best(keep: set[str]) -> str:
        return max(candidates, key=lambda s: worst(s, keep))

    chosen = {f: best(set(families) - {f}) for f in families}
    rows = {}
    for c, cases in by_cadence.items():
        results = [tables[c][chosen[case.family]][i] for i, case in enumerate(cases)]
        rows[str(c)] = scored(cases, results)
    final = best(set(families))
    return {"chosen_per_family": chosen, "held_out": rows, "final_spec": final}


COLUMNS = (("precision", "P"), ("recall", "R"), ("fpr", "FPR"), ("regret_share", "regret / rise"),
           ("mean_delay", "delay"), ("compute_saved", "saved"))
#: Per family, regret in gold units (a family's rise can be near 0: runs that never improve).
FAMILY_COLUMNS = (("precision", "P"), ("recall", "R"), ("fpr", "FPR"), ("mean_regret", "regret"))


def render_check(check: Mapping[str, Any], held: Mapping[str, Any] | None = None) -> str:
    """Markdown: the default's overall row at each cadence, every family at each cadence."""
    spec = check["spec"]
    head = "| cadence | runs | " + " | ".join(t for _, t in COLUMNS) + " |"
    lines = [f"The default `{spec}` at each cadence (all bank runs; goals P, R >= 0.95, FPR <= 0.05, "
             "regret <= 5 % of the rise):", "", head, "|---" * (len(COLUMNS) + 2) + "|"]
    for cadence, entry in check["cadences"].items():
        lines.append(_line(f"{cadence} evals", entry["overall"]))
    if held is not None:
        lines += ["", f"Held out (leave one family out, chosen by the worst cadence; final choice "
                  f"`{held['final_spec']}`):", "", head, "|---" * (len(COLUMNS) + 2) + "|"]
        lines += [_line(f"{c} evals", row) for c, row in held["held_out"].items()]
    titles = [f"{t} @{c}" for c in check["cadences"] for _, t in FAMILY_COLUMNS]
    lines += ["", f"The default `{spec}` per family:", "", "| family | " + " | ".join(titles) + " |",
              "|---" * (1 + 4 * len(check["cadences"])) + "|"]
    families = next(iter(check["cadences"].values()))["families"]
    for family in families:
        rows = [check["cadences"][c]["families"][family] for c in check["cadences"]]
        cells = [_fmt(row[k]) for row in rows for k, _ in FAMILY_COLUMNS]
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    ceiling = check["ceiling_stops"]
    verdict = "stops on " + ", ".join(ceiling) if ceiling else "no stop"
    lines += ["", f"Real supervised curves: FPR {_fmt(check['supervised_fpr'])}. "
              f"Flat at a ceiling with a dip below the floor: {verdict}.",
              "Misses: " + ("; ".join(check["misses"]) if check["misses"] else "none") + "."]
    for cadence, best in check.get("frontier", {}).items():
        found = (f"{_fmt(best['recall'])} (`{best['spec']}`, P {_fmt(best['precision'])}, FPR "
                 f"{_fmt(best['fpr'])})" if best["spec"] else "none meets P and FPR")
        lines.append(f"Upper bound at {cadence} evals: of {best['n_specs']} cusum, noise-aware and "
                     f"mann-kendall specs tuned in-sample at this cadence alone, the best recall with "
                     f"P >= 0.95 and FPR <= 0.05 is {found}.")
    return "\n".join(lines) + "\n"


def _line(label: str, row: Mapping[str, float]) -> str:
    n = int(row["n"])
    return f"| {label} | {n} | " + " | ".join(_fmt(row[k]) for k, _ in COLUMNS) + " |"


def _fmt(value: float) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.3f}"
