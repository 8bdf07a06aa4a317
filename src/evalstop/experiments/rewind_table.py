"""The Markdown tables of ``evalstop rewind``: per end-of-run rule, the arms per batch and pooled,
the compute-matched comparison and the regimes."""

from __future__ import annotations

from typing import Any

END_RULE_TEXT = {
    "final": "final (a run that reaches the end of its budget delivers its last model)",
    "best": "best by watched eval (a run that reaches the end of its budget delivers its best "
            "checkpoint by the watched eval)",
}


def format_families(families: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Every proxy family's tables."""
    return "\n\n".join(format_tables(results, name) for name, results in families.items())


def format_tables(results: dict[str, dict[str, Any]], family: str = "linear") -> str:
    """Every end-of-run rule's tables, after one header line."""
    first = next(iter(results.values()))
    batches = ", ".join(f"study seed {b}: {g['n_seeds']}" for b, g in first["batches"].items())
    lines = [
        f"Rewind study, proxy family {family}: {first['n_seeds']} seeds per arm ({batches}), tiny TRL "
        f"GRPO on CPU, rule "
        f"{first['detector']}, {first['cpu_s_per_step']:.3f} CPU-s per step (stands in for GPU-s). "
        "Every arm: a stop delivers its best checkpoint by the watched eval.",
    ]
    for rule, result in results.items():
        lines += ["", f"End of budget: {END_RULE_TEXT[rule]}", "", *_arms(result), "", *_matched(result),
                  "", *_regimes(result)]
    return "\n".join(lines)


def _groups(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, arm summaries): each batch when there are several, then the pooled seeds."""
    batches = result["batches"]
    groups = [(f"seed {b}", g["arms"]) for b, g in batches.items()] if len(batches) > 1 else []
    return [*groups, ("pooled", result["arms"])]


def _ci(v: list[float], sign: str = "", digits: int = 3) -> str:
    return f"{v[0]:{sign}.{digits}f} [{v[1]:{sign}.{digits}f}, {v[2]:{sign}.{digits}f}]"


def _arms(result: dict[str, Any]) -> list[str]:
    lines = [
        "| batch | arm | true quality delivered [95 % CI] | vs stop (paired) [95 % CI] | p "
        "| wins/losses vs stop | steps | GPU-s | quality per GPU-h [95 % CI] | vs stop (paired) [95 % CI] "
        "| rewound | detected again | hacked again |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, arms in _groups(result):
        for name, a in arms.items():
            p = "—" if a["p_vs_stop"] is None else f"{a['p_vs_stop']:.2g}"
            again = [str(a[k]) if k in a else "—" for k in ("rewound", "detected_again", "hacked_again")]
            lines.append(
                f"| {label} | {name} | {_ci(a['quality'])} | {_ci(a['quality_vs_stop'], '+')} | {p} | "
                f"{a['wins_vs_stop']}/{a['losses_vs_stop']} | {a['steps']:.1f} | {a['gpu_s']:.1f} | "
                f"{_ci(a['quality_per_gpu_h'], '', 0)} | {_ci(a['quality_per_gpu_h_vs_stop'], '+', 0)} | "
                f"{' | '.join(again)} |"
            )
    return lines


def _matched(result: dict[str, Any]) -> list[str]:
    budgets = result["budgets"]
    lines = ["Compute-matched: the true quality each arm delivers when every arm gets the same budget "
             "(an arm stopped before it delivers what it delivered; one still running is cut there and "
             "delivers by the end-of-run rule); mean over seeds (paired difference against stop, 95 % CI):",
             "",
             "| batch | arm | " + " | ".join(f"{b:.0%} budget" for b in budgets) + " |",
             "|---|---|" + "---|" * len(budgets)]
    for label, arms in _groups(result):
        for name, a in arms.items():
            pairs = zip(a["anytime"], a["anytime_vs_stop"], strict=True)
            cells = [f"{m:.3f} ({_ci(d, '+')})" for m, d in pairs]
            lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
    return lines


def _regimes(result: dict[str, Any]) -> list[str]:
    lines = ["Regimes, pooled (mean quality difference against stop):"]
    for label, group in result["regimes"].items():
        if isinstance(group, dict):
            diffs = ", ".join(f"{k} {v:+.3f}" for k, v in group.items() if k != "n")
            lines.append(f"- {label}, {group['n']} seeds: {diffs}")
        else:
            lines.append(f"- {label}: {group} seeds")
    return lines
