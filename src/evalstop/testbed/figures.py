"""The testbed's figures (matplotlib, the ``plot`` extra): JCT CDFs real and simulated, and
each job's watched and gold curves with its stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def jct_cdf(summary: dict[str, Any], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    sim = summary["simulator"]
    series = [
        ("shadow (real)", [j["jct_s"] for j in summary["jobs"]["shadow"]], "C0", "-"),
        ("FIFO (sim)", [j["jct_s"] for j in sim["shadow"]["sim_jobs"].values()], "C0", "--"),
        ("enforced (real)", [j["jct_s"] for j in summary["jobs"]["enforced"]], "C1", "-"),
        ("EvalStop(FIFO) (sim)", [j["jct_s"] for j in sim["enforced"]["sim_jobs"].values()], "C1", "--"),
    ]
    for label, values, color, style in series:
        xs = np.sort(np.asarray(values, dtype=float))
        ax.step(
            xs, np.arange(1, xs.size + 1) / xs.size, where="post", label=label, color=color, linestyle=style
        )
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def job_curves(summary: dict[str, Any], raw: dict[str, list[dict[str, Any]]], path: Path) -> None:
    records = {r["name"]: r for r in raw["shadow"]}
    enforced = {j["name"]: j for j in summary["jobs"]["enforced"]}
    names = sorted(records)
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 2.2 * rows), squeeze=False, sharey=True)
    for ax, name in zip(axes.flat, names, strict=False):
        evals = records[name]["evals"]
        steps = [e["step"] for e in evals]
        ax.plot(steps, [e["score"] for e in evals], "o-", ms=2, lw=1, label="watched eval")
        ax.plot(steps, [e["gold"] for e in evals], "-", lw=1, label="gold")
        job = enforced[name]
        if job["stop_step"] is not None:
            ax.axvline(job["stop_step"], color="C3", lw=1, label="stop")
            ax.axvline(job["best_step"], color="C2", lw=1, ls=":", label="delivered")
        ax.set_title(f"{name} ({job['label']})", fontsize=8)
        ax.set_xlabel("training step", fontsize=7)
        ax.set_ylabel("eval score / gold", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
