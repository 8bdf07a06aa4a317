"""What every integration shares: building the detector, importing an extra, one job's history.

An integration feeds each new eval of one job (a Trainer run, a Tune trial, an Optuna trial) to
that job's ``Monitor``, which decides in O(1) per eval and fires exactly once (``fired_now``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from .._validation import check_choice
from ..detectors import (
    DEFAULT_SPEC,
    Detector,
    Eval,
    Monitor,
    NextEval,
    OnDetect,
    Verdict,
    format_spec,
    parse_spec,
)

#: module -> the extra that installs it.
EXTRAS = {
    "transformers": "hf",
    "trl": "hf",
    "torch": "hf",
    "ray": "tune",
    "optuna": "optuna",
}


def missing_extra(module: str, owner: str) -> ImportError:
    """The ImportError to raise when ``module`` is missing: it names the extra to install."""
    extra = EXTRAS.get(module.partition(".")[0], "all")
    return ImportError(
        f"{owner} needs {module!r}, which is not installed. Install it with pip install -e '.[{extra}]' "
        "in the evalstop checkout."
    )


def resolve_detector(detector: Detector | str | None, mode: str | None, owner: str) -> Detector:
    """The detector an integration runs: a Detector, a spec string, or None for DEFAULT_SPEC.

    ``mode`` ("max"/"min"), when given, overrides the detector's own ``mode``.
    """
    if detector is None:
        detector = parse_spec(DEFAULT_SPEC)
    elif isinstance(detector, str):
        detector = parse_spec(detector)
    elif not isinstance(detector, Detector):
        raise TypeError(
            f"The 'detector' parameter of {owner} must be a Detector, a spec string or None. "
            f"Got {detector!r} instead."
        )
    if mode is None:
        return detector
    check_choice(owner, "mode", mode, ("max", "min"))
    if getattr(detector, "mode", mode) == mode:
        return detector
    if not dataclasses.is_dataclass(detector):
        raise ValueError(f"{owner}: detector {detector!r} has no 'mode' field to set to {mode!r}.")
    return dataclasses.replace(detector, mode=mode)


def detector_mode(detector: Detector) -> str:
    """The direction in which ``detector`` reads scores ("max" unless it says otherwise)."""
    return str(getattr(detector, "mode", "max"))


def as_score(value: Any) -> float:
    """A reported metric as a float; None or anything non-numeric becomes NaN (never stops)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def describe(detector: Detector) -> str:
    """A spec for ``detector`` if it has one, else its repr."""
    try:
        return format_spec(detector)
    except TypeError:
        return repr(detector)


class EvalHistory:
    """One job's evals (kept for its record file) and the ``Monitor`` that decides over them."""

    def __init__(
        self, detector: Detector, monitor: Monitor | None = None, policy: OnDetect | None = None
    ) -> None:
        self.detector = detector
        self.monitor = Monitor(detector, policy=policy) if monitor is None else monitor
        self.evals: list[Eval] = []

    @property
    def verdict(self) -> Verdict:
        return self.monitor.verdict

    def add(self, ev: Eval) -> Verdict | None:
        """Fold ``ev`` into the monitor; None (and nothing recorded) if the step repeats or goes
        back, or the rule has already fired (its verdict is final)."""
        if not self.monitor.accepts(ev.step):
            return None
        self.evals.append(ev)
        return self.monitor.observe(ev)

    def next_eval(self) -> NextEval:
        """The monitor's hint: when the next eval is worth running."""
        return self.monitor.next_eval()

    @property
    def fired_now(self) -> bool:
        """True iff the rule fired at the most recent eval."""
        return self.monitor.fired_now

    @property
    def last_is_best(self) -> bool:
        """True iff the most recent eval is the best so far (its checkpoint is the one to keep)."""
        n = self.monitor.n_evals
        return n > 0 and self.monitor.state["best_index"] == n - 1

    def record(self) -> dict[str, Any]:
        """A JSON-ready record: the detector, the verdict, the history and the monitor."""
        v = self.verdict
        return {
            "detector": describe(self.detector),
            "decision": v.decision.value,
            "reason": v.reason,
            "stop_step": v.stop_step,
            "best_step": v.best_step,
            "best_score": v.best_score,
            "n_invalid": v.n_invalid,
            "evals": [eval_row(ev) for ev in self.evals],
            "log": self.monitor.log,
        }


def eval_row(ev: Eval) -> list[float | int | None]:
    return [ev.step, _json_float(ev.score), _json_float(ev.progress), _json_float(ev.loss)]


def _json_float(x: float | None) -> float | None:
    """JSON has no NaN/inf: write them as None."""
    return x if x is not None and math.isfinite(x) else None


def evals_from_rows(rows: Sequence[Sequence[Any]]) -> list[Eval]:
    """Rebuild evals from ``record()["evals"]`` rows (None scores come back as NaN)."""
    return [Eval(int(r[0]), as_score(r[1]), _optional(r[2]), _optional(r[3])) for r in rows]


def _optional(x: Any) -> float | None:
    return None if x is None else float(x)
