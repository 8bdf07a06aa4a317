"""Cluster-level numbers on real dynamics: simulated workloads whose RLHF jobs replay bank runs.

``run_bank_seed`` is ``runner.run_seed`` with a bank: the RLHF jobs take their eval curves and
truth from bank runs (``workloads.bank.bank_workload``, drawn with the same seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..sim.cluster import SimConfig
from ..workloads import WorkloadConfig
from ..workloads.bank import BankRun
from .policies import PAPER_DETECTOR, PolicySpec
from .runner import run_seed

Row = dict[str, Any]
METRICS = (
    "precision", "recall", "fpr", "fpr_healthy_rlhf", "jct_mean_s", "wasted_gpu_hours", "mean_regret_hacking",
)


def bank_policies(detector: str) -> tuple[PolicySpec, ...]:
    """The base scheduler alone, with the paper's rule, with ``detector``, and the oracle."""
    return (
        PolicySpec("SRTF-Est"),
        PolicySpec("EvalStop (paper rule) + SRTF-Est", detector=PAPER_DETECTOR),
        PolicySpec(f"EvalStop ({detector}) + SRTF-Est", detector=detector),
        PolicySpec("Oracle", oracle=True),
    )


def run_bank_seed(
    workload: WorkloadConfig,
    runs: Sequence[BankRun],
    policies: Sequence[PolicySpec],
    seed: int,
    sim: SimConfig | None = None,
) -> list[Row]:
    """Pure: one bank-backed workload for ``seed``, every policy on it, one row per policy."""
    return run_seed(workload, policies, seed, sim, bank=runs)


def summarise(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Mean over seeds of each metric, per policy (None values, i.e. undefined, are skipped)."""
    by_policy: dict[str, list[Row]] = {}
    for row in rows:
        by_policy.setdefault(row["policy"], []).append(row)
    out: dict[str, dict[str, float]] = {}
    for policy, group in by_policy.items():
        out[policy] = {}
        for key in METRICS:
            values = [float(r[key]) for r in group if r[key] is not None]
            out[policy][key] = float(np.mean(values)) if values else float("nan")
    return out


def render_cluster(summary: dict[str, dict[str, float]], n_seeds: int, preset: str) -> str:
    """A Markdown table of ``summarise`` output."""
    head = "| policy | " + " | ".join(METRICS) + " |"
    title = f"Cluster simulation, preset {preset!r}, RLHF curves from the bank, mean of {n_seeds} seeds:"
    lines = [title, "", head, "|---" * (len(METRICS) + 1) + "|"]
    for policy, row in summary.items():
        cells = ["—" if not np.isfinite(row[k]) else f"{row[k]:.3f}" for k in METRICS]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
