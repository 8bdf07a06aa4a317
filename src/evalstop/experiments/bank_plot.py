"""One figure of the bank: a run per family, its eval scores and true gold, and where each rule
stops. matplotlib is imported here only (``pip install -e '.[plot]'``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..detectors import parse_spec
from ..workloads.bank import BankRun


def plot_bank(runs: Sequence[BankRun], specs: Sequence[str], path: Path) -> Path:
    """Write a PNG: one panel per family (its first run), stops of ``specs`` as vertical lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("plotting needs matplotlib: pip install -e '.[plot]'") from exc
    firsts: dict[str, BankRun] = {}
    for run in runs:
        firsts.setdefault(run.family, run)
    cols = 4
    rows = (len(firsts) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (family, run) in zip(axes.flat, firsts.items(), strict=False):
        progress = [ev.progress for ev in run.evals]
        ax.plot(progress, [ev.score for ev in run.evals], ".", color="grey", label="eval score")
        ax.plot(progress, run.truth.true_gold, "-", color="black", label="true gold")
        for colour, spec in zip(colours, specs, strict=False):
            verdict = parse_spec(spec).evaluate(run.evals)
            if verdict.stop_index is not None:
                ax.axvline(progress[verdict.stop_index] or 0.0, color=colour, linestyle="--", label=spec)
        ax.set_title(f"{family} ({run.truth.label})", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(firsts):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
