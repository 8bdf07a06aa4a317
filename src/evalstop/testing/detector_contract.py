"""The detector contract as executable checks.

Each ``check_*`` raises ``ContractError`` (an AssertionError) naming the detector, the history
and what broke. ``check_detector`` runs them all:

- construction: default-constructible, frozen (assignment raises), hashable, equal to a copy,
  and its spec round-trips through ``format_spec``/``parse_spec``;
- prefixes: ``evaluate`` on every prefix agrees with the full history (CONTINUE before the first
  stop, the identical verdict from the stop on);
- bad data: making the score, loss or progress of eval j NaN/inf/missing never creates a stop
  at j;
- best checkpoint: ``best_score`` is the best valid score (by ``mode``) up to the stop, at its
  first occurrence, and ``n_invalid`` counts the skipped scores;
- incremental: folding ``update`` gives ``evaluate`` of every prefix, never changes the state it
  is given, and a state that goes through ``json.dumps(allow_nan=False)``/``json.loads`` at any
  point gives the same decisions afterwards (so does a ``Monitor`` saved with ``to_json``);
- bounded state: however long the history, the state never holds more per-eval values than the
  rule's ``state_window`` (``check_state_bounded``, on a long noisy curve).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ..detectors import Decision, Detector, Eval, Monitor, Verdict, format_spec, parse_spec

_NAN = math.nan
_INF = math.inf

#: (field, bad value) pairs that ``check_corruption`` writes into one eval at a time.
CORRUPTIONS: tuple[tuple[str, float | None], ...] = (
    ("score", _NAN),
    ("score", _INF),
    ("score", -_INF),
    ("loss", _NAN),
    ("loss", -_INF),
    ("loss", None),
    ("progress", _NAN),
    ("progress", _INF),
    ("progress", None),
)


class ContractError(AssertionError):
    """A detector broke the contract."""


def _history(scores: Sequence[float], losses: Sequence[float | None] | None = None) -> tuple[Eval, ...]:
    n = len(scores)
    loss_values = list(losses) if losses is not None else [None] * n
    return tuple(
        Eval(step=10 * (i + 1), score=s, progress=(i + 1) / n, loss=loss_values[i])
        for i, s in enumerate(scores)
    )


#: Small histories covering the shapes the rules distinguish (peak then fall, rise, plateau,
#: invalid values, loss plateau and SLAQ-style convergence). Used with your own histories.
FIXED_HISTORIES: tuple[tuple[Eval, ...], ...] = (
    (),
    _history([0.5]),
    _history([0.1, 0.3, 0.5, 0.6, 0.55, 0.5, 0.45, 0.4], [2.0, 1.5, 1.2, 1.0, 0.9, 0.85, 0.84, 0.84]),
    _history([0.1 * i for i in range(1, 11)], [1.0 - 0.1 * i for i in range(10)]),
    _history([0.5, 0.5, 0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
    _history([0.2, _NAN, 0.4, _INF, 0.3, -_INF, 0.2, 0.1], [1.0, _NAN, 0.8, None, 0.8, _INF, 0.8, 0.8]),
    _history([_NAN, _NAN, _NAN, _NAN]),
    _history([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [3.0, 2.0, 1.5, 1.45, 1.44, 1.44]),
)


def _fail(detector: Detector, what: str, evals: Sequence[Eval] | None = None) -> ContractError:
    where = "" if evals is None else f"\n  history: {list(evals)!r}"
    return ContractError(f"{detector!r} breaks the detector contract: {what}{where}")


def check_frozen(detector: Detector) -> None:
    """Default-constructible, frozen, hashable, equal to a copy, and spec round-trips."""
    cls = type(detector)
    try:
        cls()
    except Exception as exc:
        raise _fail(detector, f"{cls.__name__}() must work with defaults ({exc!r})") from exc
    if not dataclasses.is_dataclass(detector):
        raise _fail(detector, "a detector must be a dataclass")
    try:
        hash(detector)
    except TypeError as exc:
        raise _fail(detector, "a detector must be hashable") from exc
    for f in dataclasses.fields(detector):
        try:
            setattr(detector, f.name, getattr(detector, f.name))
        except dataclasses.FrozenInstanceError:
            continue
        raise _fail(detector, f"assigning {f.name!r} must raise FrozenInstanceError")
    if dataclasses.replace(detector) != detector:
        raise _fail(detector, "a copy with the same parameters must compare equal")
    if not detector.name:
        raise _fail(detector, "the class attribute 'name' must be set")
    if parse_spec(format_spec(detector)) != detector:
        raise _fail(detector, f"spec {format_spec(detector)!r} does not round-trip")


def check_prefixes(detector: Detector, evals: Sequence[Eval]) -> Verdict:
    """Every prefix agrees with the full history; return the full verdict."""
    full = detector.evaluate(evals)
    if detector.evaluate(list(evals)) != full:
        raise _fail(detector, "evaluate is not deterministic (or depends on the sequence type)", evals)
    stop = full.stop_index
    for n in range(len(evals) + 1):
        verdict = detector.evaluate(evals[:n])
        if stop is None or n <= stop:
            if verdict.decision is not Decision.CONTINUE or verdict.stop_index is not None:
                what = f"prefix of {n} evals says {verdict!r}; the full history stops at {stop}"
                raise _fail(detector, what, evals)
        elif verdict != full:
            raise _fail(detector, f"prefix of {n} evals says {verdict!r}, the full history {full!r}", evals)
    return full


def check_history(detector: Detector, evals: Sequence[Eval], verdict: Verdict | None = None) -> None:
    """The verdict is well formed: a stop names its eval and carries a reason."""
    verdict = detector.evaluate(evals) if verdict is None else verdict
    if verdict.stopped != (verdict.stop_index is not None):
        raise _fail(detector, f"STOP if and only if stop_index is set: {verdict!r}", evals)
    if verdict.stop_index is not None:
        if not 0 <= verdict.stop_index < len(evals):
            raise _fail(detector, f"stop_index out of range: {verdict!r}", evals)
        if verdict.stop_step != evals[verdict.stop_index].step:
            raise _fail(detector, f"stop_step is not the step of eval stop_index: {verdict!r}", evals)
        if not verdict.reason.strip():
            raise _fail(detector, "a STOP verdict must carry a reason", evals)


def check_best(detector: Detector, evals: Sequence[Eval], verdict: Verdict | None = None) -> None:
    """best_* is the first best valid score (by ``mode``) up to the stop; n_invalid counts the rest."""
    verdict = detector.evaluate(evals) if verdict is None else verdict
    mode = getattr(detector, "mode", "max")
    if mode not in ("max", "min"):
        raise _fail(detector, f"mode must be 'max' or 'min', got {mode!r}")
    seen = evals if verdict.stop_index is None else evals[: verdict.stop_index + 1]
    valid = [(i, ev) for i, ev in enumerate(seen) if _finite(ev.score)]
    expected: dict[str, Any] = {"best_index": None, "best_step": None, "best_score": None}
    if valid:
        pick = max if mode == "max" else min
        score = pick(ev.score for _, ev in valid)
        i, ev = next((i, ev) for i, ev in valid if ev.score == score)
        expected = {"best_index": i, "best_step": ev.step, "best_score": score}
    expected["n_invalid"] = len(seen) - len(valid)
    got = {key: getattr(verdict, key) for key in expected}
    if got != expected:
        raise _fail(detector, f"best checkpoint {got} != expected {expected}", evals)


def check_corruption(detector: Detector, evals: Sequence[Eval], verdict: Verdict | None = None) -> None:
    """Making one eval's value NaN/inf/missing never creates a stop at that eval."""
    verdict = detector.evaluate(evals) if verdict is None else verdict
    for j, ev in enumerate(evals):
        for field, bad in CORRUPTIONS:
            changes: dict[str, Any] = {field: bad}
            corrupted = [*evals[:j], dataclasses.replace(ev, **changes), *evals[j + 1 :]]
            if detector.evaluate(corrupted).stop_index == j != verdict.stop_index:
                raise _fail(detector, f"{field}={bad!r} at eval {j} made the rule fire there", evals)


def _json_round_trip(value: Any, detector: Detector, evals: Sequence[Eval]) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise _fail(detector, f"state {value!r} is not JSON without NaN/inf ({exc})", evals) from exc


def check_incremental(detector: Detector, evals: Sequence[Eval]) -> None:
    """The fold of ``update`` is ``evaluate`` on every prefix; ``update`` leaves its input state
    alone; a JSON round trip of the state (or of a ``Monitor``) after any eval changes nothing."""
    expected = [detector.evaluate(evals[:n]) for n in range(len(evals) + 1)]
    state = detector.start()
    if detector.verdict(state) != expected[0]:
        raise _fail(detector, f"the verdict of start() is {detector.verdict(state)!r}, not {expected[0]!r}")
    for n, ev in enumerate(evals, start=1):
        before = copy.deepcopy(state)
        new, verdict = detector.update(state, ev)
        if state != before:
            raise _fail(detector, f"update changed the state it was given at eval {n - 1}", evals)
        if verdict != expected[n]:
            raise _fail(detector, f"the fold of update after {n} evals says {verdict!r}, "
                                  f"evaluate says {expected[n]!r}", evals)
        state = new
        _check_evidence(detector, state, evals, n)
        if n < len(evals):
            _check_resume(detector, evals, n, _json_round_trip(state, detector, evals), expected)


def _check_evidence(detector: Detector, state: Any, evals: Sequence[Eval], n: int) -> None:
    """What the rule says of its state (drawn by the console) is finite and JSON-able, and its
    ``elevated`` (read by the adaptive cadence) is a bool; neither changes the state."""
    before = copy.deepcopy(state)
    said = detector.evidence(state)
    elevated = detector.elevated(state)
    if state != before:
        raise _fail(detector, f"evidence() or elevated() changed the state after {n} evals", evals)
    values = [said.statistic, said.limit, said.band]
    if not all(v is None or math.isfinite(v) for v in values) or not isinstance(elevated, bool):
        raise _fail(detector, f"evidence after {n} evals is {said!r} (elevated={elevated!r}): "
                              "values must be finite and elevated a bool", evals)


def _check_resume(
    detector: Detector, evals: Sequence[Eval], cut: int, state: Any, expected: Sequence[Verdict]
) -> None:
    """Resume from a state saved after ``cut`` evals, by ``update`` and as a ``Monitor``."""
    monitor = Monitor(detector)
    monitor.observe_many(evals[:cut])
    monitor = Monitor.from_json(_json_round_trip(monitor.to_json(), detector, evals))
    for n in range(cut + 1, len(evals) + 1):
        state, verdict = detector.update(state, evals[n - 1])
        got = monitor.observe(evals[n - 1])
        if verdict != expected[n] or got != expected[n]:
            what = f"after a JSON round trip at eval {cut}, {n} evals say {verdict!r} / {got!r}"
            raise _fail(detector, f"{what}, not {expected[n]!r}", evals)


def state_size(state: Any) -> int:
    """Values held in the state's lists (the stop record excluded): what ``state_window`` bounds."""
    return sum(len(v) for k, v in state.items() if isinstance(v, list) and k != "stop")


def long_noisy_history(n: int, seed: int = 0) -> list[Eval]:
    """A noisy curve that rises, falls, recovers and plateaus, with some NaNs and a falling
    loss: the hard case for windowed rules (no early stop on it is assumed)."""
    import random

    rng = random.Random(seed)
    evals = []
    for i in range(n):
        phase = (i % 997) / 997.0
        score = 0.5 + 0.3 * math.sin(6.0 * phase) - 0.1 * phase + rng.gauss(0.0, 0.05)
        if rng.random() < 0.01:
            score = _NAN
        evals.append(Eval(step=i + 1, score=score, progress=min(1.0, (i + 1) / n) * 0.5,
                          loss=1.0 / (1.0 + i) + 0.01 * rng.random()))
    return evals


def check_state_bounded(detector: Detector, n: int = 3000) -> None:
    """Fold a long noisy history into a rule that never fires on it (``step`` is called past a
    stop) and check that its state never holds more than ``state_window`` values."""
    state = detector.start()
    largest = 0
    for index, ev in enumerate(long_noisy_history(n)):
        state["n"] = index + 1
        detector.step(state, index, ev)  # ignore stops: keep the state growing if it would
        largest = max(largest, state_size(state))
    if largest > detector.state_window:
        raise _fail(detector, f"the state held {largest} values > state_window={detector.state_window}")


def check_detector(detector: Detector, histories: Iterable[Sequence[Eval]] = FIXED_HISTORIES) -> None:
    """Run the whole contract over ``histories`` (default: ``FIXED_HISTORIES``)."""
    check_frozen(detector)
    for evals in histories:
        verdict = check_prefixes(detector, evals)
        check_history(detector, evals, verdict)
        check_best(detector, evals, verdict)
        check_corruption(detector, evals, verdict)
        check_incremental(detector, evals)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
