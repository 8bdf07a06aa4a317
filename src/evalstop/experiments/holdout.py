"""Scoring stopping rules on labelled curves, and choosing their parameters on held-out families.

A *case* is one run: its evals, its label (``hacking``, ``healthy`` or ``borderline``) and its
true quality at every eval. For one rule and one case the outcome is where the rule stops (if
it does) and which checkpoint is delivered: the best eval seen when stopped, the final
checkpoint otherwise (``docs/metrics.md``). Borderline runs count in regret, compute and delay,
not in precision, recall or FPR.

A false stop (a stopped healthy run) is *harmful* when the true quality of the checkpoint it
delivered is more than ``HARM_SHARE`` (5 %) of the run's rise below the final checkpoint's, the
one running to the end delivers; the rise is the final true quality minus the first eval's (a run
with no rise has no tolerance: any loss against its end is harm). ``harmful`` decides it.

Parameters are chosen by leave-families-out cross-validation: the families are split into
``folds`` groups; for each group, every rule's grid is scored on the other families and the best
spec is applied to the held-out group. Every run thus gets a verdict from a spec chosen without
seeing its family.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from ..detectors import Detector, Eval, parse_spec

#: The targets on held-out runs; parameter choice minimises the total shortfall.
TARGETS = {"precision": 0.95, "recall": 0.95, "fpr": 0.05, "mean_regret": 0.02}
#: A false stop is harmful beyond this share of the run's rise (``harmful``).
HARM_SHARE = 0.05
#: Weight of a regret shortfall (gold scale) against the rate shortfalls.
REGRET_WEIGHT = 5.0


@dataclass(frozen=True)
class Case:
    job_id: str
    family: str
    label: str
    evals: tuple[Eval, ...]
    true_quality: tuple[float, ...]
    peak_index: int


@dataclass(frozen=True)
class Outcome:
    stop_index: int | None
    delivered_index: int


def harmful(case: Case, stop_index: int | None, delivered_index: int) -> bool:
    """Whether stopping the run at ``stop_index`` and delivering eval ``delivered_index`` is a
    harmful false stop: the run is healthy, it was stopped, and the delivered checkpoint's true
    quality is more than ``HARM_SHARE`` of the rise (final minus first true quality, 0 if
    negative) below the final one's."""
    if stop_index is None or case.label != "healthy":
        return False
    quality = case.true_quality
    end = quality[-1]
    rise = max(end - quality[0], 0.0)
    return end - quality[delivered_index] > HARM_SHARE * rise


def outcome(detector: Detector, case: Case) -> Outcome:
    verdict = detector.evaluate(case.evals)
    last = len(case.evals) - 1
    if verdict.stop_index is None or verdict.best_index is None:
        return Outcome(verdict.stop_index, last)
    return Outcome(verdict.stop_index, verdict.best_index)


def outcomes(specs: Iterable[str], cases: Sequence[Case]) -> dict[str, list[Outcome]]:
    """Each spec's outcome on every case (parse errors raise ValueError naming the spec)."""
    return {spec: [outcome(parse_spec(spec), case) for case in cases] for spec in specs}


def metrics(cases: Sequence[Case], results: Sequence[Outcome]) -> dict[str, float]:
    """Precision, recall, FPR, harmful false stops (over healthy runs), regret, delay, compute
    saved, stopped before the peak, and the counts the rates come from; nan when undefined
    (``docs/metrics.md``)."""
    pairs = list(zip(cases, results, strict=True))
    pos = [o.stop_index is not None for c, o in pairs if c.label == "hacking"]
    neg = [o.stop_index is not None for c, o in pairs if c.label == "healthy"]
    tp, fp = sum(pos), sum(neg)
    harm = sum(harmful(c, o.stop_index, o.delivered_index) for c, o in pairs)
    regret = [c.true_quality[c.peak_index] - c.true_quality[o.delivered_index] for c, o in pairs]
    stopped = [(c, o.stop_index) for c, o in pairs if o.stop_index is not None]
    delays = [_progress(c, i) - _progress(c, c.peak_index) for c, i in stopped if c.label == "hacking"]
    saved = [1.0 - _progress(c, i) for c, i in stopped]
    return {
        "n": float(len(cases)),
        "n_hacking": float(len(pos)),
        "n_healthy": float(len(neg)),
        "tp": float(tp),
        "fp": float(fp),
        "n_harmful": float(harm),
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, len(pos)),
        "fpr": _ratio(fp, len(neg)),
        "harmful": _ratio(harm, len(neg)),
        "mean_regret": _mean(regret),
        "p90_regret": float(np.percentile(regret, 90)) if regret else math.nan,
        "mean_delay": _mean(delays),
        "compute_saved": _ratio(sum(saved), len(cases)),
        "stopped_before_peak": _ratio(sum(i < c.peak_index for c, i in stopped), len(stopped)),
    }


def objective(m: Mapping[str, float]) -> float:
    """What parameter choice maximises: minus the total shortfall from ``TARGETS`` (precision,
    recall and FPR in rate units, regret times ``REGRET_WEIGHT``), plus a tie-break of 0.01 *
    (recall - FPR + compute saved) among specs that meet every target equally. Undefined
    (nan) metrics count as no shortfall."""
    shortfalls = [
        TARGETS["precision"] - m["precision"],
        TARGETS["recall"] - m["recall"],
        m["fpr"] - TARGETS["fpr"],
        REGRET_WEIGHT * (m["mean_regret"] - TARGETS["mean_regret"]),
    ]
    total = sum(max(0.0, s) for s in shortfalls if math.isfinite(s))
    tie = [m["recall"], -m["fpr"], m["compute_saved"]]
    return -total + 0.01 * sum(t for t in tie if math.isfinite(t))


def expand_grid(rule: str, grid: Mapping[str, Sequence[Any]]) -> list[str]:
    """``rule`` with every combination of the grid's values, as specs (``rule`` may carry
    fixed parameters after a colon)."""
    name, _, fixed = rule.partition(":")
    keys = list(grid)
    specs = []
    for values in product(*(grid[k] for k in keys)):
        params = [p for p in fixed.split(",") if p] + [f"{k}={v}" for k, v in zip(keys, values, strict=True)]
        specs.append(name + (":" + ",".join(params) if params else ""))
    return specs


def family_folds(families: Sequence[str], folds: int, seed: int) -> list[list[str]]:
    """Split the families into ``folds`` groups, shuffled by ``seed`` (deterministic);
    ``folds=0`` leaves one family out at a time."""
    unique = sorted(set(families))
    if folds == 0:
        return [[f] for f in unique]
    if not 2 <= folds <= len(unique):
        raise ValueError(f"folds must be between 2 and the number of families ({len(unique)}). Got {folds}.")
    order = np.random.default_rng(np.random.SeedSequence(seed)).permutation(len(unique))
    return [sorted(unique[i] for i in order[f::folds]) for f in range(folds)]


@dataclass(frozen=True)
class HeldOut:
    rule: str
    chosen: dict[str, str]  # held-out group (families joined by '+') -> spec chosen without it
    results: list[Outcome]  # one per case, each from the spec chosen without its family


def cross_validate(
    cases: Sequence[Case], grid_specs: Sequence[str], folds: Sequence[Sequence[str]], rule: str = ""
) -> HeldOut:
    """Leave-families-out choice of one spec among ``grid_specs`` per fold."""
    table = outcomes(grid_specs, cases)
    results: list[Outcome | None] = [None] * len(cases)
    chosen = {}
    for held in folds:
        train = [i for i, c in enumerate(cases) if c.family not in held]
        train_cases = [cases[i] for i in train]
        best = max(grid_specs, key=lambda s: objective(metrics(train_cases, [table[s][i] for i in train])))
        chosen["+".join(held)] = best
        for i, c in enumerate(cases):
            if c.family in held:
                results[i] = table[best][i]
    missing = [cases[i].family for i, r in enumerate(results) if r is None]
    if missing:
        raise ValueError(f"families {sorted(set(missing))} are in no fold")
    return HeldOut(rule or grid_specs[0].partition(":")[0], chosen, [r for r in results if r is not None])


def _progress(case: Case, index: int) -> float:
    p = case.evals[index].progress
    return (index + 1) / len(case.evals) if p is None or not math.isfinite(p) else p


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan
