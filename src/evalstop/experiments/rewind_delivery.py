"""What each arm of the rewind study delivers: one rule for every arm.

- **At a stop** (the rule's first detection in the stop arm, the second one in a rewind arm), the
  job ends and delivers its best checkpoint by the watched eval: the first eval with the highest
  watched score up to the stop (the rule's own best: a new best must be strictly better).
- **At the end of the budget** (no stop, or a cut at a smaller budget), the end-of-run rule:
  ``"final"`` delivers the last model; ``"best"`` delivers the best checkpoint by the watched eval,
  as ``load_best_model_at_end`` would. The study reports both, since they differ.

A rewound run's evals after the rewind are past its detection step (the trainer keeps counting),
and the evals it rewound over are below its best, so "the first highest watched eval up to a
step" is the same in every arm. Before the first eval the job holds its initial policy, whose
true gold is 0 (``trl_runs`` rescales gold so).
"""

from __future__ import annotations

from typing import Any

END_RULES = ("final", "best")
#: the end-of-run rule of the headline: the final checkpoint (a confirmation eval that would
#: show the best is better is not part of this study's runs)
DEFAULT_END_RULE = "final"


def delivered_step(run: dict[str, Any], until: int, stopped: bool, end_rule: str) -> int | None:
    """The eval step whose model a run delivers when it ends at step ``until`` (``stopped``: by
    a stop, else by the end of its budget); None before its first eval."""
    if end_rule not in END_RULES:
        raise ValueError(f"The 'end_rule' parameter must be one of {', '.join(END_RULES)}. Got {end_rule!r}.")
    best_step, best, last = None, None, None
    for step, score in zip(run["steps"], run["watched"], strict=True):
        if step > until:
            break
        last = step
        if best is None or score > best:
            best_step, best = step, score
    return best_step if stopped or end_rule == "best" else last


def delivered_gold(run: dict[str, Any], until: int, stopped: bool, end_rule: str) -> float:
    """The true gold of what ``delivered_step`` names (0.0, the initial policy, before any eval)."""
    step = delivered_step(run, until, stopped, end_rule)
    return 0.0 if step is None else float(run["gold"][run["steps"].index(step)])
