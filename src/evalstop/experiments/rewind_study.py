"""The rewind study's arms and measures, from the recorded runs of ``rewind_runs`` (docs/rewind.md).

Per seed there is one base run (no intervention) and one run per correction (rewind at the first
detection, stop at the second). The arms:

- ``none``: the base run to its end; it delivers its last model.
- ``stop``: EvalStop as it is: the default rule replayed over the base run's watched evals; at
  the detection the job ends and delivers its best checkpoint (best by the watched eval). A run
  the rule never stops is the ``none`` run (it delivers its last model).
- ``rewind-kl``, ``rewind-lr``: the rewind runs. A run stopped (at its second detection) delivers
  its best checkpoint; a run that reaches ``n_steps`` delivers its last model, as ``none`` does.

Measures, per arm: the true quality (the held-out gold eval) of what it delivers; the training
steps it used, and GPU-seconds = steps x the CPU seconds per step measured on the base runs (this
CPU stands in for the GPU); the quality it would deliver at equal budgets (the job cut at 25, 50,
75 and 100 % of ``n_steps``: what it delivered if it had ended by then; else, for ``none``, the
model at that step, and for the arms with a rule, the rule's best checkpoint so far, since a cut
is a stop); how often a rewound run is detected again, and how often its true gold falls again
by at least ``REHACK_DROP`` below its peak after the rewind. Differences against ``stop`` are
paired by seed (95 % bootstrap CIs of the mean difference, Wilcoxon signed-rank p).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

from ..detectors import DEFAULT_SPEC, STOP, Eval, Monitor, OnDetect
from .stats import mean_ci

SHIPPED = Path(__file__).resolve().parents[1] / "workloads" / "data" / "rewind-grpo" / "runs.json.gz"
REHACK_DROP = 0.1
BUDGETS = (0.25, 0.5, 0.75, 1.0)
#: How the rule ran in the rewind runs (the correction does not change what the rule does).
_REPLAY = OnDetect("rewind", max_rewinds=1, correction="lr*=1")


def deliveries(seed: dict[str, Any], arms: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per arm of one seed: delivered true quality, steps used, the anytime quality per budget."""
    base = seed["base"]
    n_steps = base["steps_trained"]
    monitor = Monitor(DEFAULT_SPEC)
    for step, score in zip(base["steps"], base["watched"], strict=True):
        if monitor.observe(Eval(step, score)).stopped:
            break
    v = monitor.verdict
    out = {"none": _arm(base, None, None, n_steps, None)}
    out["stop"] = _arm(base, v.stop_step, v.best_step, n_steps, STOP)
    out["stop"]["detect_step"] = v.stop_step
    for arm in arms:
        run = seed[arm]
        stops = [e for e in run["log"] if e["event"] == "stop"]
        stop_step, best = (stops[0]["step"], stops[0]["best_step"]) if stops else (None, None)
        out[arm] = _arm(run, stop_step, best, n_steps, _REPLAY)
        out[arm].update(_rehack(run))
    return out


def _arm(run: dict[str, Any], stop_step: int | None, best_step: int | None, n_steps: int,
         policy: OnDetect | None) -> dict[str, Any]:
    gold = dict(zip(run["steps"], run["gold"], strict=True))
    order = list(gold)  # eval steps in training order (a rewound run's are past the detection)
    delivered = gold[best_step] if best_step is not None else gold[order[-1]]
    used = stop_step if stop_step is not None else run["steps_trained"]
    anytime = []
    for fraction in BUDGETS:
        budget = round(fraction * n_steps)
        if used <= budget:
            anytime.append(delivered)
        elif policy is None:  # no rule: the model at that step
            anytime.append(gold[max(s for s in order if s <= budget)])
        else:  # a cut is a stop: the rule's best checkpoint so far
            anytime.append(gold[_best_by(run, budget, policy)])
    return {"quality": delivered, "steps": used, "anytime": anytime}


def _best_by(run: dict[str, Any], budget: int, policy: OnDetect) -> int:
    """The best step of the rule (rewinding as the run did) over the run's evals up to ``budget``."""
    monitor = Monitor(DEFAULT_SPEC, policy=policy)
    for step, score in zip(run["steps"], run["watched"], strict=True):
        if step > budget:
            break
        monitor.observe(Eval(step, score))
        if monitor.action == "rewind":
            monitor.rewind()
    best = monitor.verdict.best_step
    return int(best) if best is not None else run["steps"][0]


def _rehack(run: dict[str, Any]) -> dict[str, Any]:
    rewinds = [e for e in run["log"] if e["event"] == "rewind"]
    if not rewinds:
        return {"rewound": False, "detected_again": False, "hacked_again": False}
    after = [g for s, g in zip(run["steps"], run["gold"], strict=True) if s > rewinds[0]["step"]]
    peak = max(after) if after else -math.inf
    fell = bool(after) and min(after[after.index(peak):]) <= peak - REHACK_DROP
    detects = sum(e["event"] == "detect" for e in run["log"])
    return {"rewound": True, "detected_again": detects > 1, "hacked_again": fell}


def analyse(data: dict[str, Any]) -> dict[str, Any]:
    """The study's result: per-arm summaries, paired differences against stop, per-seed rows."""
    arms = list(data["corrections"])
    rows = [deliveries(seed, arms) for seed in data["seeds"]]
    steps = sum(s["base"]["steps_trained"] for s in data["seeds"])
    cpu_per_step = sum(s["base"]["cpu_s"] for s in data["seeds"]) / steps
    names = ["none", "stop", *arms]
    stops = [r["stop"] for r in rows]
    summary = {name: _summary([r[name] for r in rows], stops, cpu_per_step) for name in names}
    return {
        "n_seeds": len(rows), "detector": DEFAULT_SPEC, "base": data["base"],
        "corrections": data["corrections"],
        "command": data.get("command"), "cpu_s_per_step": cpu_per_step, "budgets": list(BUDGETS),
        "arms": summary, "regimes": _regimes(rows, arms), "rows": rows,
    }


def _summary(runs: list[dict[str, Any]], stops: list[dict[str, Any]], cpu_per_step: float) -> dict[str, Any]:
    quality = [r["quality"] for r in runs]
    diff = [r["quality"] - s["quality"] for r, s in zip(runs, stops, strict=True)]
    extra = [r["steps"] - s["steps"] for r, s in zip(runs, stops, strict=True)]
    out: dict[str, Any] = {
        "quality": _ci(quality), "steps": float(np.mean([r["steps"] for r in runs])),
        "gpu_s": float(np.mean([r["steps"] for r in runs])) * cpu_per_step,
        "quality_vs_stop": _ci(diff), "p_vs_stop": _wilcoxon(diff), "extra_steps_vs_stop": _ci(extra),
        "wins_vs_stop": sum(d > 0 for d in diff), "losses_vs_stop": sum(d < 0 for d in diff),
        "anytime": [float(np.mean([r["anytime"][i] for r in runs])) for i in range(len(BUDGETS))],
        "anytime_vs_stop": [_ci([r["anytime"][i] - s["anytime"][i] for r, s in zip(runs, stops, strict=True)])
                            for i in range(len(BUDGETS))],
    }
    if "rewound" in runs[0]:
        rewound = [r for r in runs if r["rewound"]]
        out["rewound"] = len(rewound)
        out["detected_again"] = sum(r["detected_again"] for r in rewound)
        out["hacked_again"] = sum(r["hacked_again"] for r in rewound)
    return out


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


def format_table(result: dict[str, Any]) -> str:
    """The Markdown tables the command prints."""
    arms = result["arms"]
    lines = [
        f"Rewind study: {result['n_seeds']} seeds per arm, tiny TRL GRPO on CPU, rule {result['detector']}, "
        f"{result['cpu_s_per_step']:.3f} CPU-s per step (stands in for GPU-s)",
        "",
        "| arm | true quality delivered [95 % CI] | vs stop (paired) [95 % CI] | p | wins/losses vs stop "
        "| steps | GPU-s | rewound | detected again | hacked again |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, a in arms.items():
        q, d = a["quality"], a["quality_vs_stop"]
        p = "—" if a["p_vs_stop"] is None else f"{a['p_vs_stop']:.2g}"
        again = [str(a[k]) if k in a else "—" for k in ("rewound", "detected_again", "hacked_again")]
        lines.append(
            f"| {name} | {q[0]:.3f} [{q[1]:.3f}, {q[2]:.3f}] | {d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}] | "
            f"{p} | {a['wins_vs_stop']}/{a['losses_vs_stop']} | {a['steps']:.1f} | {a['gpu_s']:.1f} | "
            f"{' | '.join(again)} |"
        )
    budgets = result["budgets"]
    lines += ["", "True quality at equal budgets (the job cut at that many GPU-seconds), mean over seeds:",
              "",
              "| arm | " + " | ".join(f"{b:.0%} budget" for b in budgets) + " |",
              "|---|" + "---|" * len(budgets)]
    for name, a in arms.items():
        pairs = zip(a["anytime"], a["anytime_vs_stop"], strict=True)
        cells = [f"{m:.3f} ({d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}])" for m, d in pairs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "(in brackets: the paired difference against stop, 95 % CI)", "",
              "Regimes (mean quality difference against stop):"]
    for label, group in result["regimes"].items():
        if isinstance(group, dict):
            diffs = ", ".join(f"{k} {v:+.3f}" for k, v in group.items() if k != "n")
            lines.append(f"- {label}, {group['n']} seeds: {diffs}")
        else:
            lines.append(f"- {label}: {group} seeds")
    return "\n".join(lines)
