"""The rewind study's figure: delivered true quality against GPU time (seconds), per arm. matplotlib is
imported here only (``pip install -e '.[plot]'``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(result: dict[str, Any], path: Path) -> Path:
    """Left: each arm's mean delivered quality (95 % CI) at its mean GPU-seconds, seeds as dots.
    Right: the quality each arm would deliver if cut at a budget (mean over seeds)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("plotting needs matplotlib: pip install -e '.[plot]'") from exc
    per_step_s = result["cpu_s_per_step"]
    n_steps = result["base"]["n_steps"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for colour, (name, arm) in zip(colours, result["arms"].items(), strict=False):
        xs = [row[name]["steps"] * per_step_s for row in result["rows"]]
        ys = [row[name]["quality"] for row in result["rows"]]
        left.plot(xs, ys, ".", color=colour, alpha=0.25)
        q = arm["quality"]
        left.errorbar([arm["steps"] * per_step_s], [q[0]], yerr=[[q[0] - q[1]], [q[2] - q[0]]], fmt="o",
                      color=colour, capsize=4, label=name)
        budgets = [b * n_steps * per_step_s for b in result["budgets"]]
        right.plot(budgets, arm["anytime"], "o-", color=colour, label=name)
    left.set_xlabel("GPU-seconds per job (CPU seconds stand in)")
    left.set_ylabel("true quality delivered (held-out gold)")
    left.set_title(f"Delivered quality vs compute, {result['n_seeds']} seeds (end of budget: "
                   f"{result['end_rule']})", fontsize=10)
    left.legend(fontsize=8)
    right.set_xlabel("budget: GPU-seconds per job")
    right.set_ylabel("true quality if cut at the budget")
    right.set_title("Quality at equal GPU-seconds", fontsize=10)
    right.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
