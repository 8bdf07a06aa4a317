"""The rewind study's arms and measures, from the recorded runs of ``rewind_runs``.

Per seed there is one base run (no intervention) and one run per correction (rewind at the first
detection, stop at the second). The arms:

- ``none``: the base run to its end.
- ``stop``: EvalStop as it is: the default rule replayed over the base run's watched evals; at
  the detection the job ends. A run the rule never stops runs to its end.
- one arm per correction (``rewind-kl``, ...): the rewind runs; a second detection stops them.

Every arm delivers by the same rule (``rewind_delivery``): at a stop its best checkpoint by the
watched eval, at the end of its budget what the end-of-run rule (``"final"`` or ``"best"``) says.

Measures, per arm and seed: the true quality (the held-out gold eval) of what it delivers; the
training steps it used, and GPU-seconds = steps x the CPU seconds per step measured on the base
runs (this CPU stands in for the GPU); quality per GPU-hour (delivered quality / GPU-hours); the
**compute-matched** quality: what it delivers when every arm gets the same budget (25, 50, 75 and
100 % of ``n_steps``): an arm that stopped before the budget delivers what it delivered, one still
running is cut there and delivers by the end-of-run rule; how often a rewound run is detected
again, and how often its true gold falls again by at least ``REHACK_DROP`` below its peak after
the rewind. Differences against ``stop`` are paired by seed (95 % bootstrap CIs of the mean
difference, Wilcoxon signed-rank p), per batch (the seeds of one study seed) and pooled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from ..detectors import DEFAULT_SPEC, Eval, Monitor
from .rewind_delivery import DEFAULT_END_RULE, END_RULES, delivered_gold
from .stats import mean_ci

SHIPPED = Path(__file__).resolve().parents[1] / "workloads" / "data" / "rewind-grpo" / "runs.json.gz"
REHACK_DROP = 0.1
BUDGETS = (0.25, 0.5, 0.75, 1.0)
SECONDS_PER_HOUR = 3600.0


def deliveries(
    seed: dict[str, Any], arms: Sequence[str], end_rule: str = DEFAULT_END_RULE
) -> dict[str, dict[str, Any]]:
    """Per arm of one seed: delivered true quality, steps used, the quality per budget."""
    base = seed["base"]
    n_steps = base["steps_trained"]
    monitor = Monitor(DEFAULT_SPEC)
    for step, score in zip(base["steps"], base["watched"], strict=True):
        if monitor.observe(Eval(step, score)).stopped:
            break
    detect = monitor.verdict.stop_step
    out = {"none": _arm(base, None, n_steps, end_rule), "stop": _arm(base, detect, n_steps, end_rule)}
    out["stop"]["detect_step"] = detect
    for arm in arms:
        run = seed[arm]
        stop = next((e["step"] for e in run["log"] if e["event"] == "stop"), None)
        out[arm] = _arm(run, stop, n_steps, end_rule)
        out[arm].update(_rehack(run))
    return out


def _arm(run: dict[str, Any], stop_step: int | None, n_steps: int, end_rule: str) -> dict[str, Any]:
    stopped = stop_step is not None
    used = stop_step if stop_step is not None else run["steps_trained"]
    delivered = delivered_gold(run, used, stopped, end_rule)
    matched = []
    for fraction in BUDGETS:
        budget = round(fraction * n_steps)
        matched.append(delivered if used <= budget else delivered_gold(run, budget, False, end_rule))
    return {"quality": delivered, "steps": used, "anytime": matched}


def _rehack(run: dict[str, Any]) -> dict[str, Any]:
    rewinds = [e for e in run["log"] if e["event"] == "rewind"]
    if not rewinds:
        return {"rewound": False, "detected_again": False, "hacked_again": False}
    after = [g for s, g in zip(run["steps"], run["gold"], strict=True) if s > rewinds[0]["step"]]
    peak = max(after) if after else -math.inf
    fell = bool(after) and min(after[after.index(peak):]) <= peak - REHACK_DROP
    detects = sum(e["event"] == "detect" for e in run["log"])
    return {"rewound": True, "detected_again": detects > 1, "hacked_again": fell}


def analyse(batches: Sequence[dict[str, Any]], end_rule: str = DEFAULT_END_RULE) -> dict[str, Any]:
    """The study's result under one end-of-run rule: per-arm summaries pooled over every batch
    (paired differences against stop), the same per batch, and the per-seed rows."""
    first = batches[0]
    for data in batches[1:]:
        if data["base"] != first["base"] or data["corrections"] != first["corrections"]:
            raise ValueError(f"batch {data.get('study_seed')} ran another design than batch "
                             f"{first.get('study_seed')}: {data['base']}, {data['corrections']}")
    arms = list(first["corrections"])
    seeds = [(data.get("study_seed", 0), seed) for data in batches for seed in data["seeds"]]
    rows = [{"batch": batch, **deliveries(seed, arms, end_rule)} for batch, seed in seeds]
    steps = sum(seed["base"]["steps_trained"] for _, seed in seeds)
    cpu_per_step = sum(seed["base"]["cpu_s"] for _, seed in seeds) / steps
    names = ["none", "stop", *arms]
    by_batch = {b: [r for r in rows if r["batch"] == b] for b in dict.fromkeys(r["batch"] for r in rows)}
    return {
        "n_seeds": len(rows), "end_rule": end_rule, "detector": DEFAULT_SPEC, "base": first["base"],
        "corrections": first["corrections"], "command": [data.get("command") for data in batches],
        "cpu_s_per_step": cpu_per_step, "budgets": list(BUDGETS),
        "arms": _summaries(rows, names, cpu_per_step),
        "batches": {str(b): {"n_seeds": len(group), "arms": _summaries(group, names, cpu_per_step)}
                    for b, group in by_batch.items()},
        "regimes": _regimes(rows, arms), "rows": rows,
    }


def analyse_rules(batches: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``analyse`` under every end-of-run rule, by rule."""
    return {rule: analyse(batches, rule) for rule in END_RULES}


def family(batch: dict[str, Any]) -> str:
    """A batch's proxy family (``TrlConfig.proxy``; the shipped batch predates the field: linear)."""
    return str(batch["base"].get("proxy", "linear"))


def analyse_families(batches: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``analyse_rules`` per proxy family: {family: {end rule: result}}."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for batch in batches:
        groups.setdefault(family(batch), []).append(batch)
    return {name: analyse_rules(group) for name, group in groups.items()}


def headline(families: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The result the figure and the platform model use: the linear family (else the first one)
    under the headline end-of-run rule."""
    return families.get("linear", next(iter(families.values())))[DEFAULT_END_RULE]


def _summaries(rows: list[dict[str, Any]], names: list[str], cpu_per_step: float) -> dict[str, Any]:
    stops = [r["stop"] for r in rows]
    return {name: _summary([r[name] for r in rows], stops, cpu_per_step) for name in names}


def _summary(runs: list[dict[str, Any]], stops: list[dict[str, Any]], cpu_per_step: float) -> dict[str, Any]:
    pairs = list(zip(runs, stops, strict=True))
    diff = [r["quality"] - s["quality"] for r, s in pairs]
    per_h = [_per_gpu_hour(r, cpu_per_step) for r in runs]
    per_h_stop = [_per_gpu_hour(s, cpu_per_step) for s in stops]
    out: dict[str, Any] = {
        "quality": _ci([r["quality"] for r in runs]), "steps": float(np.mean([r["steps"] for r in runs])),
        "gpu_s": float(np.mean([r["steps"] for r in runs])) * cpu_per_step,
        "quality_vs_stop": _ci(diff), "p_vs_stop": _wilcoxon(diff),
        "extra_steps_vs_stop": _ci([r["steps"] - s["steps"] for r, s in pairs]),
        "wins_vs_stop": sum(d > 0 for d in diff), "losses_vs_stop": sum(d < 0 for d in diff),
        "quality_per_gpu_h": _ci(per_h),
        "quality_per_gpu_h_vs_stop": _ci([a - b for a, b in zip(per_h, per_h_stop, strict=True)]),
        "anytime": [float(np.mean([r["anytime"][i] for r in runs])) for i in range(len(BUDGETS))],
        "anytime_vs_stop": [_ci([r["anytime"][i] - s["anytime"][i] for r, s in pairs])
                            for i in range(len(BUDGETS))],
    }
    if "rewound" in runs[0]:
        rewound = [r for r in runs if r["rewound"]]
        out["rewound"] = len(rewound)
        out["detected_again"] = sum(r["detected_again"] for r in rewound)
        out["hacked_again"] = sum(r["hacked_again"] for r in rewound)
    return out


def _per_gpu_hour(run: dict[str, Any], cpu_per_step: float) -> float:
    return float(run["quality"]) / (float(run["steps"]) * cpu_per_step / SECONDS_PER_HOUR)


def _ci(values: Sequence[float]) -> list[float]:
    if len(values) < 2:
        return [float(np.mean(values)), math.nan, math.nan] if values else [math.nan] * 3
    mean, lo, hi = mean_ci([float(v) for v in values])
    return [mean, lo, hi]


def _wilcoxon(diff: Sequence[float]) -> float | None:
    if sum(d != 0 for d in diff) < 2:
        return None
    result: Any = sps.wilcoxon(diff, zero_method="wilcox")
    return float(result.pvalue)


def _regimes(rows: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Which arm wins where: seeds split by the detection step (early / late, at the median) and
    by whether the rule detected at all."""
    detected = [r for r in rows if r["stop"]["detect_step"] is not None]
    out: dict[str, Any] = {"not detected": len(rows) - len(detected)}
    if not detected:
        return out
    median = float(np.median([r["stop"]["detect_step"] for r in detected]))
    for label in ("early", "late"):
        group = [r for r in detected if (r["stop"]["detect_step"] <= median) == (label == "early")]
        if group:
            out[f"{label} detection (step {'<=' if label == 'early' else '>'} {median:g})"] = {
                "n": len(group),
                **{name: float(np.mean([r[name]["quality"] - r["stop"]["quality"] for r in group]))
                   for name in ("none", *arms)},
            }
    return out
