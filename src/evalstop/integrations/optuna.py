"""EvalStop as an Optuna pruner: any evalstop detector over a trial's intermediate values.

    study = optuna.create_study(direction="maximize", pruner=EvalStopPruner("evalstop:k=2"))

In the objective, ``trial.report(score, step)`` then ``if trial.should_prune(): raise
optuna.TrialPruned()`` as with any pruner. The history is ``trial.intermediate_values`` in step
order. The pruner folds each trial's new values into that trial's ``Monitor`` (O(1) per value),
kept in a cache of the ``MONITOR_CACHE`` most recent trials; a trial that fell out of the cache
(or runs in another process) has its values folded again from the start, with the same result.
A value reported at a step below one already folded is ignored. ``mode`` defaults to the
study's direction. A NaN or
infinite latest value never prunes (it warns); ``wrapped`` composes with another pruner (prune
if either says so). ``verdict(study, trial)`` gives the reason and the best step.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from typing import Any

from .._validation import check_choice
from ..detectors import Detector, Eval, Monitor, Verdict
from ._common import missing_extra, resolve_detector

try:
    import optuna
    from optuna.pruners import BasePruner
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without optuna
    raise missing_extra("optuna", "EvalStopPruner") from exc


#: Trials whose Monitor the pruner keeps (least recently used dropped first).
MONITOR_CACHE = 4096


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
        self._monitors: OrderedDict[tuple[str, int], Monitor] = OrderedDict()

    def detector(self, study: Any) -> Detector:
        """The detector as applied to ``study`` (``mode`` given, or the study's direction)."""
        mode = self._mode
        if mode is None:
            mode = "max" if study.direction == optuna.study.StudyDirection.MAXIMIZE else "min"
        return self._detectors[mode]

    def verdict(self, study: Any, trial: Any) -> Verdict:
        """The detector's verdict over ``trial``'s intermediate values so far."""
        detector = self.detector(study)
        key = (str(getattr(study, "study_name", "")), int(getattr(trial, "_trial_id", trial.number)))
        monitor = self._monitors.pop(key, None)
        if monitor is None or monitor.detector != detector:
            monitor = Monitor(detector)
        self._monitors[key] = monitor
        if len(self._monitors) > MONITOR_CACHE:
            self._monitors.popitem(last=False)
        values = trial.intermediate_values
        last = monitor.last_step
        if last is None or trial.last_step != last:
            new = sorted(step for step in values if last is None or step > last)
            monitor.observe_many(Eval(int(step), float(values[step])) for step in new)
        return monitor.verdict

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
