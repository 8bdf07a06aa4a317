"""Per-study statistics and claim verdicts, from per-seed rows.

Within each point of a study every policy ran on the same workloads (one per seed), so each
comparison is paired by seed: Wilcoxon signed-rank and paired t-test, a bootstrap 95 % CI of the
relative change (resampling seeds), and Cohen's d_z (``stats.paired_compare``). Every reported
mean carries a bootstrap 95 % CI (``stats.mean_ci``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from .spec import ClaimSpec, StudySpec
from .stats import mean_ci, paired_compare

__all__ = ["COMPARED", "SUMMARY_METRICS", "analyse_study", "check_claim"]

Row = dict[str, Any]
SUMMARY_METRICS = (
    "precision", "recall", "fpr", "fpr_healthy_rlhf", "jct_mean_s", "jct_p50_s", "jct_p95_s",
    "jct_p99_s", "wasted_gpu_hours", "after_peak_gpu_hours", "overhead_gpu_hours", "hacking_gpu_hours",
    "gpu_hours_total", "mean_regret", "mean_regret_hacking", "utilisation", "n_killed",
    "eval_gpu_hours", "evals_per_rlhf_job",
)
COMPARED = ("jct_mean_s", "jct_p95_s", "jct_p99_s", "wasted_gpu_hours", "hacking_gpu_hours",
            "gpu_hours_total", "mean_regret_hacking", "eval_gpu_hours")
N_BOOT = 2000


def analyse_study(
    study: StudySpec, rows_by_point: Sequence[Sequence[Row]], seeds: Sequence[int]
) -> dict[str, Any]:
    """Summaries, paired comparisons vs the baseline, JCT quantiles and claim verdicts."""
    summary, comparisons, quantiles = [], [], []
    for rows in rows_by_point:
        by_policy = {p.label: [r for r in rows if r["policy"] == p.label] for p in study.policies}
        summary.append({label: _summarise(rs) for label, rs in by_policy.items()})
        base = by_policy[study.baseline]
        comparisons.append({
            label: {m: _compare(base, rs, m) for m in COMPARED}
            for label, rs in by_policy.items() if label != study.baseline
        })
        if any("jct_quantiles_s" in r for r in rows):
            quantiles.append({label: _mean_quantiles(rs) for label, rs in by_policy.items()})
    result: dict[str, Any] = {
        "name": study.name, "title": study.title, "description": study.description, "role": study.role,
        "baseline": study.baseline, "treatment": study.treatment,
        "policies": [asdict(p) for p in study.policies],
        "x_param": study.x_param, "x_label": study.x_label, "x_unit": study.x_unit,
        "x_values": list(study.x_values),
        "tick_labels": None if study.tick_labels is None else list(study.tick_labels),
        "log_x": study.log_x, "figures": list(study.figures), "seeds": list(seeds),
        "points": [{"workload": asdict(p.workload), "sim": asdict(p.sim),
                    "trace": None if p.trace is None else asdict(p.trace),
                    "policies": [asdict(q) for q in p.policies]} for p in study.points],
        "summary": summary, "comparisons": comparisons,
        "jct_quantiles_s": quantiles or None, "status": "ok", "reason": "",
    }
    result["claims"] = [check_claim(c, result) for c in study.claims]
    return result


def _summarise(rows: Sequence[Row]) -> dict[str, dict[str, float | int | None]]:
    out: dict[str, dict[str, float | int | None]] = {}
    for metric in SUMMARY_METRICS:
        values = [float(r[metric]) for r in rows if r.get(metric) is not None]
        if not values:
            out[metric] = {"mean": None, "lo": None, "hi": None, "n": 0}
            continue
        mean, lo, hi = mean_ci(values, n_boot=N_BOOT)
        out[metric] = {"mean": mean, "lo": _none(lo), "hi": _none(hi), "n": len(values)}
    return out


def _compare(base: Sequence[Row], treat: Sequence[Row], metric: str) -> dict[str, Any] | None:
    pairs = [(b[metric], t[metric]) for b, t in zip(base, treat, strict=True)
             if b.get(metric) is not None and t.get(metric) is not None]
    if not pairs:
        return None
    b, t = zip(*pairs, strict=True)
    return paired_compare(list(map(float, b)), list(map(float, t)), n_boot=N_BOOT).as_dict()


def _mean_quantiles(rows: Sequence[Row]) -> list[float] | None:
    qs = [r["jct_quantiles_s"] for r in rows if r.get("jct_quantiles_s")]
    return [float(v) for v in np.mean(np.array(qs), axis=0)] if qs else None


def _none(x: float) -> float | None:
    return None if math.isnan(x) else x


# -- claims ----------------------------------------------------------------------------------
def check_claim(claim: ClaimSpec, study: Mapping[str, Any]) -> dict[str, Any]:
    """Our measurement of ``claim``, its verdict, and by how much it misses if it does."""
    policy = claim.policy or study["treatment"]
    points = _in_range(claim, study["x_values"])
    scale = 100.0 if claim.unit == "%" else 1.0
    checker = {"value": _value, "change": _change, "at_least": _bound, "at_most": _bound,
               "change_within": _change_within}[claim.kind]
    ours, ours_value, ok, verdict, details = checker(claim, study, policy, points, scale)
    return {
        "study": study["name"], "role": study["role"], "name": claim.name, "paper": claim.paper,
        "kind": claim.kind, "policy": policy, "metric": claim.metric, "ours": ours,
        "ours_value": ours_value, "paper_value": _paper_value(claim), "tolerance": _tolerance(claim, scale),
        "reproduced": ok, "verdict": verdict, "note": claim.note.strip(), "details": details,
    }


def _in_range(claim: ClaimSpec, xs: Sequence[Any]) -> list[int]:
    def inside(x: Any) -> bool:
        if x is None or not isinstance(x, int | float):
            return True
        above = claim.x_min is None or x >= claim.x_min - 1e-12
        return above and (claim.x_max is None or x <= claim.x_max + 1e-12)

    return [i for i, x in enumerate(xs) if inside(x)]


def _fmt(value: float | None, scale: float, signed: bool = False) -> str:
    if value is None:
        return "—"
    text = f"{scale * value:+.1f}" if signed else f"{scale * value:.1f}"
    return text + (" %" if scale == 100.0 else "")


def _points(value: float, scale: float) -> str:
    """A signed difference in points (percentage metrics) or units."""
    return _fmt(value, scale, True).replace(" %", " points")


def _x(study: Mapping[str, Any], i: int) -> str:
    ticks = study.get("tick_labels")
    if ticks:
        return str(ticks[i])
    x = study["x_values"][i]
    return "" if x is None else f"{study['x_param']}={x}"


def _value(claim: ClaimSpec, study: Mapping[str, Any], policy: str, points: list[int], scale: float) -> Any:
    i = points[0]
    stat = study["summary"][i][policy][claim.metric]
    mean, target = stat["mean"], float(claim.target or 0.0)
    ours = _fmt(mean, scale)
    if stat["lo"] is not None:
        ours += f" [{_fmt(stat['lo'], scale)}, {_fmt(stat['hi'], scale)}]"
    if mean is None:
        return ours, None, False, "not measured", []
    off = mean - target
    ok = abs(off) <= claim.tolerance + 1e-12
    verdict = "reproduced" if ok else f"not reproduced: off by {_points(off, scale)}"
    return ours, mean, ok, verdict, []


def _change_text(cmp: Mapping[str, Any] | None, scale: float) -> str:
    if cmp is None or cmp["rel_change"] is None:
        return "—"
    text = _fmt(cmp["rel_change"], 100.0, True)
    if cmp["rel_change_ci_lo"] is not None:
        lo, hi = cmp["rel_change_ci_lo"], cmp["rel_change_ci_hi"]
        text += f" [{_fmt(lo, 100.0, True)}, {_fmt(hi, 100.0, True)}]"
    if cmp["p_ttest"] is not None:
        text += f", p={cmp['p_ttest']:.2g}"
    return text


def _significant(cmp: Mapping[str, Any]) -> bool:
    """Paired t-test p < 0.05 (the Wilcoxon p is reported beside it in the JSON and the report)."""
    return cmp["p_ttest"] is not None and cmp["p_ttest"] < 0.05


def _change(claim: ClaimSpec, study: Mapping[str, Any], policy: str, points: list[int], scale: float) -> Any:
    cmp = study["comparisons"][points[0]][policy][claim.metric]
    ours = _change_text(cmp, scale)
    if cmp is None or cmp["rel_change"] is None:
        return ours, None, False, "not measured", []
    rel, target = cmp["rel_change"], float(claim.target or 0.0)
    close = abs(rel - target) <= claim.tolerance + 1e-12
    ok = close and _significant(cmp)
    if ok:
        verdict = "reproduced"
    elif close:
        verdict = "not reproduced: not significant (p ≥ 0.05)"
    else:
        verdict = f"not reproduced: off by {100 * (rel - target):+.1f} points"
    return ours, rel, ok, verdict, []


def _bound(claim: ClaimSpec, study: Mapping[str, Any], policy: str, points: list[int], scale: float) -> Any:
    threshold, at_least = float(claim.threshold or 0.0), claim.kind == "at_least"
    details, worst_i, worst = [], None, None
    for i in points:
        stat = study["summary"][i][policy][claim.metric]
        details.append({"x": _x(study, i), "mean": stat["mean"], "lo": stat["lo"], "hi": stat["hi"]})
        mean = stat["mean"]
        if mean is not None and (worst is None or (mean < worst if at_least else mean > worst)):
            worst, worst_i = mean, i
    if worst is None or worst_i is None:
        return "—", None, False, "not measured", details
    where = _x(study, worst_i)
    ours = ("min " if at_least else "max ") + _fmt(worst, scale) + (f" at {where}" if where else "")
    ok = worst >= threshold if at_least else worst <= threshold
    off = abs(worst - threshold)
    verdict = "reproduced" if ok else f"not reproduced: {_fmt(off, scale).replace(' %', ' points')} " + (
        "below" if at_least else "above") + f" {_fmt(threshold, scale)}" + (f" at {where}" if where else "")
    return ours, worst, ok, verdict, details


def _change_within(
    claim: ClaimSpec, study: Mapping[str, Any], policy: str, points: list[int], scale: float
) -> Any:
    low, high = float(claim.low or 0.0) - claim.tolerance, float(claim.high or 0.0) + claim.tolerance
    details: list[dict[str, Any]] = []
    misses: list[str] = []
    for i in points:
        cmp = study["comparisons"][i][policy][claim.metric]
        rel = None if cmp is None else cmp["rel_change"]
        ok = rel is not None and low <= rel <= high and _significant(cmp)
        details.append({"x": _x(study, i), "rel_change": rel, "text": _change_text(cmp, scale), "ok": ok})
        if not ok:
            misses.append(f"{_x(study, i)} {_change_text(cmp, scale).split(' [')[0]}")
    rels = [d["rel_change"] for d in details if d["rel_change"] is not None]
    ours = "; ".join(f"{d['x']} {_fmt(d['rel_change'], 100.0, True)}" for d in details)
    if not rels:
        return ours, None, False, "not measured", details
    verdict = "reproduced" if not misses else "not reproduced on " + ", ".join(misses)
    return ours, float(np.mean(rels)), not misses, verdict, details


def _paper_value(claim: ClaimSpec) -> float | None:
    for v in (claim.target, claim.threshold):
        if v is not None:
            return float(v)
    if claim.low is not None and claim.high is not None:
        return (claim.low + claim.high) / 2
    return None


def _tolerance(claim: ClaimSpec, scale: float) -> str:
    if claim.kind in ("value", "change"):
        unit = " points" if scale == 100.0 or claim.kind == "change" else ""
        factor = 100.0 if claim.kind == "change" else scale
        text = f"± {factor * claim.tolerance:g}{unit}"
        return text + (", p < 0.05" if claim.kind == "change" else "")
    if claim.kind == "change_within":
        return f"± {100 * claim.tolerance:g} points, p < 0.05 on each"
    return "every point in range"
