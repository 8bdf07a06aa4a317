"""A monitor's rewinds: the record of each, the decision log, the rule state kept at the best eval.

A rewind sends a job back to its best checkpoint. The rule restarts from the state it had right
after the best eval (``snapshot``), so evals after the best no longer count, and its noise
estimate and warm-up are those of the history up to the best. Each rewind is kept as one small
JSON entry; the log is rebuilt from the entries and the current verdict, so a monitor that never
rewinds stores nothing extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._base import State, Verdict, copy_state


@dataclass(frozen=True)
class Rewind:
    """What a caller does for a rewind: go back to ``checkpoint`` (saved at ``to_step``, the
    best eval, score ``best_score``) and apply ``correction``; the rule fired at ``step``."""

    number: int
    step: int | None
    to_step: int | None
    best_score: float | None
    checkpoint: str | None
    correction: str
    reason: str

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Rewind:
        return cls(entry["number"], entry["step"], entry["to_step"], entry["best_score"],
                   entry["checkpoint"], entry["correction"], entry["reason"])


def snapshot(state: State, index: int) -> State:
    """A copy of ``state`` as it stands once eval ``index`` is folded in (not fired)."""
    saved = copy_state(state)
    saved["n"], saved["stop"] = index + 1, None
    return saved


def rewind_entry(verdict: Verdict, checkpoint: str | None, correction: str, number: int) -> dict[str, Any]:
    """The stored record of rewind ``number``, taken at the detection that ``verdict`` holds."""
    return {
        "number": number, "step": verdict.stop_step, "reason": verdict.reason,
        "to_step": verdict.best_step, "best_score": verdict.best_score, "checkpoint": checkpoint,
        "correction": correction,
    }


def decision_log(
    rewinds: Sequence[Mapping[str, Any]], verdict: Verdict, checkpoint: str | None, action: str | None
) -> list[dict[str, Any]]:
    """Each detection, each rewind and the final stop, in order."""
    log: list[dict[str, Any]] = []
    for r in rewinds:
        log.append({"event": "detect", "step": r["step"], "reason": r["reason"], "best_step": r["to_step"],
                    "best_score": r["best_score"]})
        log.append({"event": "rewind", "step": r["step"], "to_step": r["to_step"],
                    "checkpoint": r["checkpoint"], "correction": r["correction"], "number": r["number"]})
    if verdict.stopped:
        log.append({"event": "detect", "step": verdict.stop_step, "reason": verdict.reason,
                    "best_step": verdict.best_step, "best_score": verdict.best_score})
        if action == "stop":
            log.append({"event": "stop", "step": verdict.stop_step, "best_step": verdict.best_step,
                        "checkpoint": checkpoint})
    return log
