"""The paper's headline claims, each checked against our measurement with a stated tolerance."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Summary = Mapping[str, Mapping[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class Claim:
    name: str
    paper: str
    ours: str
    tolerance: str
    reproduced: bool
    verdict: str
    paper_value: float
    ours_value: float | None


def _points(name: str, paper: float, stat: Mapping[str, Any], tol: float) -> Claim:
    """A percentage claim: reproduced if our mean is within ``tol`` points of the paper's."""
    mean = stat["mean"]
    ours = "—" if mean is None else f"{100 * mean:.1f} %" + _ci(stat, 100, "%")
    ok = mean is not None and abs(100 * mean - paper) <= tol
    return _claim(name, f"{paper:.1f} %", ours, f"± {tol:g} points", ok, paper, mean, 100)


def _change(name: str, paper: float, cmp: Mapping[str, Any], tol: float) -> Claim:
    """A relative-change claim vs SRTF-Est: within ``tol`` points and significant (p < 0.05)."""
    rel, p = cmp["rel_change"], cmp["p_ttest"]
    lo, hi = cmp["rel_change_ci_lo"], cmp["rel_change_ci_hi"]
    ours = "—" if rel is None else f"{100 * rel:+.1f} %"
    if rel is not None and lo is not None and hi is not None:
        ours += f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    if p is not None:
        ours += f", p={p:.2g}"
    ok = rel is not None and abs(100 * rel - paper) <= tol and p is not None and p < 0.05
    return _claim(name, f"{paper:+.1f} %, p<0.05", ours, f"± {tol:g} points, p<0.05", ok, paper, rel, 100)


def _below(name: str, paper: float, stat: Mapping[str, Any], limit: float) -> Claim:
    mean = stat["mean"]
    ok = mean is not None and 100 * mean < limit
    ours = "—" if mean is None else f"{100 * mean:.1f} %"
    return _claim(name, f"{paper:.0f} % (< {limit:g} %)", ours, f"< {limit:g} %", ok, paper, mean, 100)


def _claim(name: str, paper: str, ours: str, tol: str, ok: bool, paper_value: float,
           ours_value: float | None, scale: float) -> Claim:
    if ours_value is None:
        verdict = "not measured"
    elif ok:
        verdict = "reproduced"
    else:
        off = scale * ours_value - paper_value
        verdict = f"not reproduced (off by {off:+.1f} points)"
    return Claim(name, paper, ours, tol, ok, verdict, paper_value, ours_value)


def _ci(stat: Mapping[str, Any], scale: float, unit: str) -> str:
    if stat.get("lo") is None or stat.get("hi") is None:
        return ""
    return f" [{scale * stat['lo']:.1f}, {scale * stat['hi']:.1f}]"


def headline_claims(summary: Summary, comparisons: Mapping[str, Mapping[str, Any]]) -> list[Claim]:
    ev, fixed, loss = summary["EvalStop + SRTF-Est"], summary["StopAt-0.65"], summary["Loss-plateau"]
    return [
        _points("EvalStop precision", 98.3, ev["precision"], 2),
        _points("EvalStop recall", 99.3, ev["recall"], 2),
        _points("EvalStop FPR (all non-hacking jobs)", 1.5, ev["fpr"], 2),
        _change("mean JCT vs SRTF-Est", -9.4, comparisons["jct_mean_s"], 3),
        _change("wasted GPU-h vs SRTF-Est (after-peak + overhead)", -21.8,
                comparisons["wasted_gpu_hours"], 3),
        _change("GPU-h on hacking jobs vs SRTF-Est (2nd reading)", -21.8,
                comparisons["hacking_gpu_hours"], 3),
        _points("StopAt-0.65 FPR", 64.5, fixed["fpr"], 5),
        _points("StopAt-0.65 precision", 57.0, fixed["precision"], 5),
        _below("Loss-plateau recall (misses more than half)", 38.0, loss["recall"], 50),
        _points("Loss-plateau precision", 57.0, loss["precision"], 5),
    ]
