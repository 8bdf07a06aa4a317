"""What a rule's decision rests on, for drawing: the running best, the rule's line on the score
axis where it has one, and the evals that counted towards the stop.

Everything comes from the job's rule through a ``Monitor`` folded over the history: after each
valid eval, ``Monitor.evidence()`` gives the line the next eval is compared against (drawn as a
step from this eval on) and the rule's statistic; the evals that counted are the run of valid
evals up to the stop whose statistic was above 0. No rule class is named here, so a new rule
draws correctly once it describes its evidence (``Detector.evidence``).

A job whose stored monitor rewound (``Monitor.log``) is folded the same way: at each detection
that the stored monitor answered with a rewind, this monitor rewinds too (the rule goes back to
its state right after the best eval), and the rewind is kept as a ``RewindMark`` from the stored
entry (its checkpoint and correction). Each attempt is the run of evals after the previous
rewind's detection; the chart draws one segment per attempt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...detectors import Detector, Eval, Monitor, OnDetect, Verdict
from ...detectors._base import is_valid, sign_of


@dataclass(frozen=True)
class RewindMark:
    """A rewind of the job: the rule fired at ``step``; the job went back to ``checkpoint`` (saved
    at ``to_step``, score ``best_score``) with ``correction`` applied."""

    number: int
    step: int
    to_step: int | None
    best_score: float | None
    checkpoint: str | None
    correction: str

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> RewindMark:
        return cls(int(entry["number"]), int(entry["step"]), entry.get("to_step"), entry.get("best_score"),
                   entry.get("checkpoint"), str(entry.get("correction") or ""))


@dataclass(frozen=True)
class Evidence:
    verdict: Verdict
    best: tuple[tuple[int, float], ...]  # (step, running best) at each valid eval
    band: tuple[tuple[int, float], ...]  # (step, the rule's line after it) at each valid eval; may be empty
    band_label: str
    counted: tuple[int, ...]  # steps of the evals that counted towards the stop
    rewinds: tuple[RewindMark, ...] = ()  # in order; the attempts are split at their steps


def explain(
    detector: Detector, evals: Sequence[Eval], policy: OnDetect | Mapping[str, Any] | None = None,
    rewinds: Sequence[Mapping[str, Any]] = (),
) -> Evidence:
    """The evidence of ``evals`` under ``detector``; ``policy`` and ``rewinds`` are the stored
    monitor's (``Monitor.to_json()``'s "policy" and "rewinds"): the rewinds it made are made again
    at the same detections."""
    monitor = Monitor(detector, policy=policy if rewinds else None)
    marks: list[RewindMark] = []
    sign = sign_of(getattr(detector, "mode", "max"))
    best: list[tuple[int, float]] = []
    band: list[tuple[int, float]] = []
    label = ""
    run: list[int] = []  # steps of the trailing valid evals with a statistic above 0
    for ev in evals:
        if not is_valid(ev.score):
            monitor.observe(ev)
            continue
        last = best[-1][1] if best else None
        best.append((ev.step, ev.score if last is None or sign * (ev.score - last) > 0 else last))
        if _rewind_as_stored(monitor, marks, rewinds):
            run = []
        if monitor.fired:
            continue
        monitor.observe(ev)
        said = monitor.evidence()
        if said.band is not None:
            band.append((ev.step, said.band))
            label = said.band_label
        run = [*run, ev.step] if said.statistic > 0 else []
    if _rewind_as_stored(monitor, marks, rewinds):  # rewound, no eval since
        run = []
    verdict = monitor.verdict
    counted = tuple(run) if verdict.stopped else ()
    return Evidence(verdict, tuple(best), tuple(band), label, counted, tuple(marks))


def _rewind_as_stored(
    monitor: Monitor, marks: list[RewindMark], rewinds: Sequence[Mapping[str, Any]]
) -> bool:
    """Rewind ``monitor`` if it has fired where the stored monitor rewound next; say whether."""
    if not (monitor.fired and len(marks) < len(rewinds) and monitor.action == "rewind"):
        return False
    marks.append(RewindMark.from_entry(rewinds[len(marks)]))
    monitor.rewind()
    return True
