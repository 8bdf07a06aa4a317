"""What a rule's decision rests on, for drawing: the running best, the rule's line on the score
axis where it has one, and the evals that counted towards the stop.

Everything comes from the job's rule through a ``Monitor`` folded over the history: after each
valid eval, ``Monitor.evidence()`` gives the line the next eval is compared against (drawn as a
step from this eval on) and the rule's statistic; the evals that counted are the run of valid
evals up to the stop whose statistic was above 0. No rule class is named here, so a new rule
draws correctly once it describes its evidence (``Detector.evidence``).

A job that rewound is drawn from what was stored, not by replaying the rule to find its rewinds:
its attempts (:func:`attempts`: the kept scores split at each rewind's checkpoint step, plus the
scores each rewind discarded, ``rewound_scores``) and its stored monitor's rewind entries (the
``RewindMark``s, with their steps, checkpoints and corrections). The evidence lines are the rule
folded over the attempts in order, going back to the best eval between them as the job did.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...detectors import Detector, Eval, Monitor, OnDetect, Verdict, format_spec
from ...detectors._base import is_valid, sign_of

log = logging.getLogger("evalstop.service.console")


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


#: ``(step, value)`` points of one line, in step order.
Line = tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Evidence:
    verdict: Verdict
    best: tuple[Line, ...]  # per attempt: (step, running best) at each valid eval
    band: tuple[Line, ...]  # per attempt: (step, the rule's line after it) at each valid eval; may be empty
    band_label: str
    counted: tuple[int, ...]  # steps of the evals that counted towards the stop
    rewinds: tuple[RewindMark, ...] = ()  # in order, from the stored monitor


def attempts(
    kept: Sequence[Eval], rewound: Sequence[tuple[int, int, float]], rewinds: Sequence[Mapping[str, Any]]
) -> list[list[Eval]]:
    """The job's attempts, first to current, each its evals in step order: the ``kept`` scores
    (those in ``scores``) after the previous rewind's checkpoint step up to this one's, and the
    ``rewound`` ones (``(attempt, step, value)``, attempt 0 first) this attempt's rewind discarded."""
    bounds = [r.get("to_step") if r.get("to_step") is not None else r["step"] for r in rewinds]
    out: list[list[Eval]] = []
    for n, (lo, hi) in enumerate(zip([None, *bounds], [*bounds, None], strict=True)):
        mine = [e for e in kept if (lo is None or e.step > lo) and (hi is None or e.step <= hi)]
        mine += [Eval(s, v) for a, s, v in rewound if a == n]
        out.append(sorted(mine, key=lambda e: e.step))
    return out


def explain(
    detector: Detector, runs: Sequence[Sequence[Eval]], policy: OnDetect | Mapping[str, Any] | None = None,
    rewinds: Sequence[Mapping[str, Any]] = (),
) -> Evidence:
    """The evidence of the job's attempts ``runs`` (see :func:`attempts`) under ``detector``;
    ``policy`` and ``rewinds`` are the stored monitor's (``Monitor.to_json()``'s "policy" and
    "rewinds"). Between attempts the rule goes back to its best eval, as the job's did."""
    monitor = Monitor(detector, policy=policy if rewinds else None)
    sign = sign_of(getattr(detector, "mode", "max"))
    best: list[list[tuple[int, float]]] = []
    band: list[list[tuple[int, float]]] = []
    label = ""
    run: list[int] = []  # steps of the trailing valid evals with a statistic above 0
    for n, evals in enumerate(runs):
        if n and monitor.action == "rewind":
            monitor.rewind()
            run = []
        top = monitor.verdict.best_score if n else None  # the best at the checkpoint it went back to
        best.append([])
        band.append([])
        for ev in evals:
            if not is_valid(ev.score) or monitor.fired:
                monitor.observe(ev)
                continue
            top = ev.score if top is None or sign * (ev.score - top) > 0 else top
            best[-1].append((ev.step, top))
            monitor.observe(ev)
            said = monitor.evidence()
            if said.band is not None and math.isfinite(said.band):
                band[-1].append((ev.step, said.band))
                label = said.band_label
            run = [*run, ev.step] if said.statistic > 0 else []
    verdict = monitor.verdict
    counted = tuple(run) if verdict.stopped else ()
    marks = tuple(RewindMark.from_entry(r) for r in rewinds)
    return Evidence(verdict, tuple(map(tuple, best)), tuple(map(tuple, band)) if label else (), label,
                    counted, marks)


def drawn(detector: Detector, runs: Sequence[Sequence[Eval]], monitor: Monitor) -> Evidence:
    """:func:`explain` for the job page, which must show whatever was stored: if the rule raises
    on these scores (an arithmetic error on extreme values is a rule's bug, logged), the curve
    is drawn with the stored monitor's verdict and rewinds and no evidence lines."""
    try:
        return explain(detector, runs, monitor.policy, monitor.rewinds)
    except (ArithmeticError, ValueError) as exc:
        log.warning("console: rule %s raised %s on a job's scores; drawn without its evidence",
                    format_spec(detector), type(exc).__name__)
        marks = tuple(RewindMark.from_entry(r) for r in monitor.rewinds)
        return Evidence(monitor.verdict, tuple(() for _ in runs), (), "", (), marks)
