"""Figures of the study report (matplotlib, the ``plot`` extra; imported only by the report).

Every figure has labelled axes with units, a legend, and 95 % bootstrap CIs as error bars or
bands. Each function takes one study's analysed results and returns a matplotlib Figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

__all__ = ["FIGURES", "changes", "detection", "eval_savings", "improvement_bars", "jct_cdf", "policy_bars",
           "tradeoff"]

Study = Mapping[str, Any]
_DETECTION = (("precision", "precision"), ("recall", "recall"), ("fpr", "FPR (all non-hacking jobs)"))


def _x(study: Study) -> tuple[list[float], list[str] | None]:
    ticks = study.get("tick_labels")
    xs = study["x_values"]
    if ticks or not all(isinstance(x, int | float) for x in xs):
        return list(range(len(xs))), list(ticks or map(str, xs))
    return [float(x) for x in xs], None


def _xaxis(ax: Any, study: Study) -> None:
    xs, ticks = _x(study)
    unit = study.get("x_unit")
    ax.set_xlabel(study["x_label"] + (f" ({unit})" if unit else ""))
    if ticks is not None:
        ax.set_xticks(xs, ticks, rotation=15)
    elif study.get("log_x"):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.grid(alpha=0.3)


def _stat_series(
    study: Study, policy: str, metric: str, scale: float = 1.0
) -> tuple[list[float], list[list[float]]]:
    means, errs_lo, errs_hi = [], [], []
    for point in study["summary"]:
        s = point[policy][metric]
        m = s["mean"] if s["mean"] is not None else float("nan")
        lo = s["lo"] if s["lo"] is not None else m
        hi = s["hi"] if s["hi"] is not None else m
        means.append(scale * m)
        errs_lo.append(scale * (m - lo))
        errs_hi.append(scale * (hi - m))
    return means, [errs_lo, errs_hi]


def _change_series(study: Study, policy: str, metric: str) -> tuple[list[float], list[list[float]]]:
    means, errs_lo, errs_hi = [], [], []
    for point in study["comparisons"]:
        c = point[policy][metric]
        rel = c["rel_change"] if c and c["rel_change"] is not None else float("nan")
        lo = c["rel_change_ci_lo"] if c and c["rel_change_ci_lo"] is not None else rel
        hi = c["rel_change_ci_hi"] if c and c["rel_change_ci_hi"] is not None else rel
        means.append(100 * rel)
        errs_lo.append(100 * (rel - lo))
        errs_hi.append(100 * (hi - rel))
    return means, [errs_lo, errs_hi]


def _claim_lines(ax: Any, study: Study, metrics: Sequence[str]) -> None:
    for claim in study.get("claims", []):
        if claim["metric"] in metrics and claim["kind"] == "at_least":
            ax.axhline(100 * claim["paper_value"], color="grey", ls="--", lw=1,
                       label=f"paper: {claim['metric']} ≥ {100 * claim['paper_value']:.0f} %")


def detection(study: Study) -> Figure:
    """Precision, recall and FPR of the treatment vs the swept parameter."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs, _ = _x(study)
    for metric, label in _DETECTION:
        ys, err = _stat_series(study, study["treatment"], metric, 100.0)
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
    _claim_lines(ax, study, ("precision", "recall"))
    _xaxis(ax, study)
    ax.set_ylabel("% of jobs (mean over seeds, 95 % CI)")
    ax.set_ylim(-2, 102)
    ax.set_title(f"{study['treatment']}: detection vs {study['x_label']}", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def changes(study: Study) -> Figure:
    """Relative change of mean JCT and wasted GPU-hours vs the baseline, per point."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs, _ = _x(study)
    series = (("jct_mean_s", "mean JCT"), ("wasted_gpu_hours", "wasted GPU-h (after peak + overhead)"),
              ("hacking_gpu_hours", "GPU-h on hacking jobs"))
    for metric, label in series:
        ys, err = _change_series(study, study["treatment"], metric)
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
    ax.axhline(0, color="black", lw=0.8)
    _xaxis(ax, study)
    ax.set_ylabel(f"change vs {study['baseline']} (%, 95 % CI)")
    ax.set_title(f"{study['treatment']} vs {study['baseline']}", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def tradeoff(study: Study) -> Figure:
    """Precision/recall against JCT/waste: one point per swept value, annotated."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 4.0))
    treat = study["treatment"]
    prec, _ = _stat_series(study, treat, "precision", 100.0)
    rec, _ = _stat_series(study, treat, "recall", 100.0)
    jct, jct_err = _change_series(study, treat, "jct_mean_s")
    waste, waste_err = _change_series(study, treat, "wasted_gpu_hours")
    labels = [f"{x}" for x in study["x_values"]]
    left.plot(rec, prec, marker="o", label=study["x_label"])
    right.errorbar(jct, waste, xerr=jct_err, yerr=waste_err, marker="o", capsize=3, label=study["x_label"])
    for i, text in enumerate(labels):
        left.annotate(text, (rec[i], prec[i]), textcoords="offset points", xytext=(4, 4), fontsize=8)
        right.annotate(text, (jct[i], waste[i]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    left.set_xlabel("recall (%)")
    left.set_ylabel("precision (%)")
    right.set_xlabel(f"mean JCT change vs {study['baseline']} (%)")
    right.set_ylabel(f"wasted GPU-h change vs {study['baseline']} (%)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="points labelled by", title_fontsize=8)
    fig.suptitle(f"{treat}: the {study['x_label']} trade-off", fontsize=10)
    fig.tight_layout()
    return fig


def jct_cdf(study: Study) -> Figure:
    """JCT CDF per policy: quantile functions averaged over seeds."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    quantiles = study["jct_quantiles_s"][0]
    probs = [i / 100 for i in range(101)]
    for label, qs in quantiles.items():
        if qs:
            ax.plot([q / 3600 for q in qs], probs, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs completed or killed")
    ax.set_title("JCT CDF per policy (quantiles averaged over seeds)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def policy_bars(study: Study) -> Figure:
    """Mean JCT and wasted GPU-hours per policy, with 95 % CIs (single-point studies)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.0))
    labels = list(study["summary"][0])
    for ax, metric, scale, ylabel in ((left, "jct_mean_s", 1 / 3600, "mean JCT (hours)"),
                                       (right, "wasted_gpu_hours", 1.0, "wasted GPU-hours per run")):
        means, err = zip(*[_one(study["summary"][0][p][metric], scale) for p in labels], strict=True)
        ax.bar(range(len(labels)), means, yerr=list(zip(*err, strict=True)), capsize=4,
               color=[f"C{i}" for i in range(len(labels))], label=labels)
        ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel(ylabel + ", 95 % CI")
        ax.grid(axis="y", alpha=0.3)
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), title="policy", title_fontsize=7)
    fig.suptitle("Per-policy means over seeds", fontsize=10)
    fig.tight_layout()
    return fig


def _one(stat: Mapping[str, Any], scale: float) -> tuple[float, tuple[float, float]]:
    m = stat["mean"] if stat["mean"] is not None else float("nan")
    lo = stat["lo"] if stat["lo"] is not None else m
    hi = stat["hi"] if stat["hi"] is not None else m
    return scale * m, (scale * (m - lo), scale * (hi - m))


def improvement_bars(study: Study) -> Figure:
    """Mean-JCT improvement of EvalStop over each base scheduler, with CIs and the paper's band."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs, ticks = _x(study)
    for offset, (metric, label) in zip((-0.2, 0.2), (("jct_mean_s", "mean JCT"),
                                                      ("wasted_gpu_hours", "wasted GPU-h")), strict=True):
        ys, err = _change_series(study, study["treatment"], metric)
        ax.bar([x + offset for x in xs], [-y for y in ys], width=0.4, yerr=[err[1], err[0]], capsize=4,
               label=f"{label} reduction")
    ax.axhspan(9, 25, color="grey", alpha=0.2, label="paper: JCT 9 to 25 % better")
    ax.set_xticks(xs, ticks or [str(x) for x in xs])
    ax.set_xlabel(study["x_label"])
    ax.set_ylabel("reduction vs the base alone (%, 95 % CI)")
    ax.set_title("EvalStop over each base scheduler", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def eval_savings(study: Study) -> Figure:
    """Eval GPU-hours saved against recall, one marker per policy: left, the share of the
    baseline's eval GPU-hours it saves (the same share at every eval cost: a policy's decisions do
    not depend on the cost, its eval time is proportional to it); right, the share of the
    baseline's total GPU-hours it saves, at each swept eval cost (marker shape). 95 % CIs: recall
    over seeds, savings paired by seed."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    ticks = study["tick_labels"] or [f"{x:g}" if isinstance(x, int | float) else str(x)
                                     for x in study["x_values"]]
    shapes = "osD^v<>p*"
    for j, label in enumerate(study["summary"][0]):
        for i, point in enumerate(study["summary"]):
            recall, recall_err = _one(point[label]["recall"], 100.0)
            compared = study["comparisons"][i].get(label)
            for ax, metric in ((left, "eval_gpu_hours"), (right, "gpu_hours_total")):
                if ax is left and i:
                    continue
                saved, saved_err = _saved(compared, metric)
                ax.errorbar([saved], [recall], xerr=[[saved_err[0]], [saved_err[1]]],
                            yerr=[[recall_err[0]], [recall_err[1]]], marker=shapes[i % len(shapes)],
                            color=f"C{j}", capsize=3, label=label if ax is left else None)
    for i, tick in enumerate(ticks):
        right.plot([], [], shapes[i % len(shapes)], color="grey", label=f"{study['x_label']} {tick}")
    base = study["baseline"]
    left.set_xlabel(f"eval GPU-hours saved vs {base} (% of its eval GPU-hours)")
    right.set_xlabel(f"total GPU-hours saved vs {base} (% of its total)")
    for ax in (left, right):
        ax.axvline(0, color="black", lw=0.8)
        ax.set_ylabel("recall (% of hacking jobs stopped)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    left.legend(fontsize=7, loc="center left", title="policy", title_fontsize=7)
    right.legend(fontsize=7, loc="center left")
    fig.suptitle("Eval GPU-hours saved against recall (means over seeds, 95 % CI)", fontsize=10)
    fig.tight_layout()
    return fig


def _saved(compared: Mapping[str, Any] | None, metric: str) -> tuple[float, tuple[float, float]]:
    """% saved against the baseline (minus its relative change) and its CI's distances; 0 for
    the baseline itself (no comparison)."""
    c = None if compared is None else compared.get(metric)
    if c is None or c["rel_change"] is None:
        return 0.0, (0.0, 0.0)
    rel = c["rel_change"]
    lo = c["rel_change_ci_lo"] if c["rel_change_ci_lo"] is not None else rel
    hi = c["rel_change_ci_hi"] if c["rel_change_ci_hi"] is not None else rel
    return -100 * rel, (100 * (hi - rel), 100 * (rel - lo))


FIGURES: dict[str, Callable[[Study], Figure]] = {
    "detection": detection, "changes": changes, "tradeoff": tradeoff, "jct_cdf": jct_cdf,
    "policy_bars": policy_bars, "improvement_bars": improvement_bars, "eval_savings": eval_savings,
}
