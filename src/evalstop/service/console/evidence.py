"""What a rule's decision rests on, for drawing: the running best, the threshold line where the
rule has one on the score axis, and the evals that counted towards the stop.

The verdict itself always comes from the job's detector (``detector.evaluate``); this module only
explains it. Rules whose threshold is not on the score axis (CUSUM's is in noise units, Mann-Kendall's
a p-value) get the running best and the evals since the best; their reason says the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...detectors import Cusum, Detector, Eval, KDeclines, NoiseAware, Patience, Verdict
from ...detectors._base import is_valid

#: Above this many evals the threshold line of an online-noise rule is not drawn (it re-estimates
#: the noise on every prefix).
MAX_ONLINE_BAND = 500


@dataclass(frozen=True)
class Evidence:
    verdict: Verdict
    best: tuple[tuple[int, float], ...]  # (step, running best) at each valid eval
    band: tuple[tuple[int, float], ...]  # (step, threshold) at each valid eval; empty if none
    band_label: str
    counted: tuple[int, ...]  # steps of the evals that counted towards the stop


def explain(detector: Detector, evals: Sequence[Eval]) -> Evidence:
    verdict = detector.evaluate(evals)
    valid = [(i, ev) for i, ev in enumerate(evals) if is_valid(ev.score)]
    sign = 1.0 if getattr(detector, "mode", "max") == "max" else -1.0
    best_values: list[float] = []
    for _, ev in valid:
        last = best_values[-1] if best_values else None
        best_values.append(ev.score if last is None or sign * (ev.score - last) > 0 else last)
    best = tuple((ev.step, b) for (_, ev), b in zip(valid, best_values, strict=True))
    band, label = _band(detector, valid, best_values, sign)
    return Evidence(verdict, best, band, label, _counted(detector, verdict, valid))


def _band(
    detector: Detector, valid: list[tuple[int, Eval]], best: list[float], sign: float
) -> tuple[tuple[tuple[int, float], ...], str]:
    steps = [ev.step for _, ev in valid]
    values = [ev.score for _, ev in valid]
    if isinstance(detector, KDeclines):
        ref = best if detector.against == "best" else [values[0], *values[:-1]] if values else []
        what = "best" if detector.against == "best" else "previous eval"
        line = [r - sign * detector.min_delta for r in ref]
        return tuple(zip(steps, line, strict=True)), f"decline threshold ({what} - min_delta)"
    if isinstance(detector, Patience):
        line = [b + sign * detector.min_delta for b in best]
        return tuple(zip(steps, line, strict=True)), "to beat (best + min_delta)"
    if isinstance(detector, NoiseAware):
        return _noise_band(detector, valid, best, sign)
    return (), ""


def _noise_band(
    detector: NoiseAware, valid: list[tuple[int, Eval]], best: list[float], sign: float
) -> tuple[tuple[tuple[int, float], ...], str]:
    from ...detectors._noise import curve_sigma

    if len(valid) > MAX_ONLINE_BAND and detector.reported_se(valid[0][1]) is None:
        return (), ""
    values = [ev.score for _, ev in valid]
    ref = best if detector.against == "best" else [values[0], *values[:-1]]
    out = []
    for j, (_, ev) in enumerate(valid):
        se = detector.reported_se(ev)
        if se is None:
            se = curve_sigma(values[: j + 1]) or 0.0
        out.append((ev.step, ref[j] - sign * detector.z * se * 2**0.5))
    return tuple(out), f"significance band (reference - z x SE of the difference, z={detector.z})"


def _counted(detector: Detector, verdict: Verdict, valid: list[tuple[int, Eval]]) -> tuple[int, ...]:
    if verdict.stop_index is None:
        return ()
    upto = [(i, ev) for i, ev in valid if i <= verdict.stop_index]
    if isinstance(detector, KDeclines | NoiseAware):
        window = upto[-detector.k:]
    elif isinstance(detector, Patience):
        window = upto[-detector.patience:]
    elif isinstance(detector, Cusum) or verdict.best_index is not None:
        best_index = verdict.best_index if verdict.best_index is not None else -1
        window = [(i, ev) for i, ev in upto if i > best_index] or upto[-1:]
    else:
        window = upto[-1:]
    return tuple(ev.step for _, ev in window)
