"""What a rule's decision rests on, for drawing: the running best, the rule's line on the score
axis where it has one, and the evals that counted towards the stop.

Everything comes from the job's rule through a ``Monitor`` folded over the history: after each
valid eval, ``Monitor.evidence()`` gives the line the next eval is compared against (drawn as a
step from this eval on) and the rule's statistic; the evals that counted are the run of valid
evals up to the stop whose statistic was above 0. No rule class is named here, so a new rule
draws correctly once it describes its evidence (``Detector.evidence``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...detectors import Detector, Eval, Monitor, Verdict
from ...detectors._base import is_valid, sign_of


@dataclass(frozen=True)
class Evidence:
    verdict: Verdict
    best: tuple[tuple[int, float], ...]  # (step, running best) at each valid eval
    band: tuple[tuple[int, float], ...]  # (step, the rule's line after it) at each valid eval; may be empty
    band_label: str
    counted: tuple[int, ...]  # steps of the evals that counted towards the stop


def explain(detector: Detector, evals: Sequence[Eval]) -> Evidence:
    monitor = Monitor(detector)
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
        if monitor.fired:
            continue
        monitor.observe(ev)
        said = monitor.evidence()
        if said.band is not None:
            band.append((ev.step, said.band))
            label = said.band_label
        run = [*run, ev.step] if said.statistic > 0 else []
    verdict = monitor.verdict
    counted = tuple(run) if verdict.stopped else ()
    return Evidence(verdict, tuple(best), tuple(band), label, counted)
