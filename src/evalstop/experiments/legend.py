"""What each column of the result tables means: printed under the CLI tables and in the report.

One place, so that ``evalstop reproduce``, ``simulate`` and the report agree (definitions in
``docs/metrics.md``). Formats: percentages as ``12.3 %`` (the report puts ``%`` in the header),
hours to 2 decimals, GPU-hours to whole hours, regret to 3 decimals, ASCII minus signs.
"""

from __future__ import annotations

from collections.abc import Iterable

#: column label -> meaning
COLUMNS: dict[str, str] = {
    "precision": "stopped jobs that were reward hacking / stopped jobs",
    "recall": "reward-hacking jobs stopped / reward-hacking jobs",
    "FPR": "healthy jobs stopped / healthy jobs (every kind: RLHF, LoRA, DPO)",
    "FPR healthy RLHF": "the same among healthy RLHF jobs only",
    "JCT": "job completion time, submission to end, in hours (mean; p95, p99: 95th, 99th percentile)",
    "wasted GPU-h": "GPU-hours spent after a hacking job's true quality peak, plus restore overhead",
    "GPU-h on hacking": "every GPU-hour spent on reward-hacking jobs",
    "regret (hacking)": "true quality at the peak minus true quality of the delivered checkpoint, "
                        "mean over hacking jobs (0 is best)",
    "evals per RLHF job": "evals an RLHF job ran by its end, under its cadence (only when evals are timed)",
    "eval GPU-h": "GPU-hours spent running evals on the jobs' own GPUs ([sim] eval_cost)",
    "total GPU-h": "every GPU-hour the jobs held: training, restore overhead and evals",
    "JCT change": "mean JCT against the baseline, paired by seed",
    "p (t / Wilcoxon)": "paired t-test / Wilcoxon signed-rank p-value",
    "d_z": "paired effect size (mean difference / sd of differences)",
    "[lo, hi]": "bootstrap 95 % confidence interval over seeds",
    "—": "undefined (e.g. precision when nothing was stopped)",
}


def legend_lines(columns: Iterable[str] | None = None, prefix: str = "") -> list[str]:
    """``label: meaning`` lines for ``columns`` (every known column when None)."""
    names = list(COLUMNS) if columns is None else [c for c in columns if c in COLUMNS]
    return [f"{prefix}{name}: {COLUMNS[name]}" for name in names]


__all__ = ["COLUMNS", "legend_lines"]
