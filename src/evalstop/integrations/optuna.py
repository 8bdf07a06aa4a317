"""EvalStop as an Optuna pruner: any evalstop detector over a trial's intermediate values.

    study = optuna.create_study(direction="maximize", pruner=EvalStopPruner("evalstop:k=2"))

In the objective, ``trial.report(score, step)`` then ``if trial.should_prune(): raise
optuna.TrialPruned()`` as with any pruner. The history is ``trial.intermediate_values`` in step
order; the pruner keeps no state of its own. ``mode`` defaults to the study's direction. A NaN or
infinite latest value never prunes (it warns); ``wrapped`` composes with another pruner (prune
if either says so). ``verdict(study, trial)`` gives the reason and the best step.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from .._validation import check_choice
from ..detectors import Detector, Eval, Verdict
from ._common import missing_extra, resolve_detector

try:
    import optuna
    from optuna.pruners import BasePruner
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without optuna
    raise missing_extra("optuna", "EvalStopPruner") from exc


class EvalStopPruner(BasePruner):
    """Prune a trial once ``detector`` has fired on its intermediate values."""

    def __init__(
        self,
        detector: Detector | str | None = None,
        *,
        mode: str | None = None,
        wrapped: Any = None,
    ) -> None:
        if wrapped is not None and not isinstance(wrapped, BasePruner):
            raise TypeError(
                f"The 'wrapped' parameter of EvalStopPruner must be an optuna pruner or None. "
                f"Got {wrapped!r} instead."
            )
        if mode is not None:
            check_choice("EvalStopPruner", "mode", mode, ("max", "min"))
        self._detector_arg = detector
        self._mode = mode
        self._wrapped = wrapped
        self._detectors = {m: resolve_detector(detector, m, "EvalStopPruner") for m in ("max", "min")}

    def detector(self, study: Any) -> Detector:
        """The detector as applied to ``study`` (``mode`` given, or the study's direction)."""
        mode = self._mode
        if mode is None:
            mode = "max" if study.direction == optuna.study.StudyDirection.MAXIMIZE else "min"
        return self._detectors[mode]

    def verdict(self, study: Any, trial: Any) -> Verdict:
        """The detector's verdict over ``trial``'s intermediate values so far."""
        values = trial.intermediate_values
        evals = [Eval(int(step), float(values[step])) for step in sorted(values)]
        return self.detector(study).evaluate(evals)

    def prune(self, study: Any, trial: Any) -> bool:
        step = trial.last_step
        if step is None:
            return False
        latest = float(trial.intermediate_values[step])
        if not math.isfinite(latest):
            warnings.warn(
                f"EvalStopPruner: trial {trial.number} reported {latest} at step {step}; not pruning.",
                stacklevel=2,
            )
            return False
        if self._wrapped is not None and self._wrapped.prune(study, trial):
            return True
        return self.verdict(study, trial).stopped


__all__ = ["EvalStopPruner"]
