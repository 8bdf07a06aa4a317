"""EvalStop for Ray Tune: a ``Stopper`` and a ``TrialScheduler`` wrapper.

    tuner = tune.Tuner(train_fn, run_config=tune.RunConfig(
        stop=EvalStopStopper("gold", "max"), checkpoint_config=best_checkpoint_config("gold", "max")))

or, to compose with another scheduler (ASHA, PBT, FIFO, ...)::

    tune.TuneConfig(scheduler=EvalStopScheduler(ASHAScheduler(), metric="gold", mode="max"))

Each trial's reports of ``metric`` form its eval history (the step is ``training_iteration``).
When the detector fires on a trial, Tune stops it (its resources go back to the other trials);
the checkpoint kept as the trial's best is the one with the best ``metric``
(``best_checkpoint_config``), i.e. the detector's best eval when the trial reports a checkpoint
with each eval. ``verdicts`` maps each trial id to its latest verdict.
"""

from __future__ import annotations

from typing import Any

from .._validation import check_choice, check_int
from ..detectors import Detector, Eval, Monitor, Verdict
from ._common import as_score, missing_extra, resolve_detector

try:
    from ray.tune import CheckpointConfig, Stopper
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without ray
    raise missing_extra("ray.tune", "evalstop.integrations.ray_tune") from exc

STEP_KEY = "training_iteration"


def best_checkpoint_config(metric: str, mode: str, num_to_keep: int = 1) -> Any:
    """A Tune CheckpointConfig that keeps the ``num_to_keep`` checkpoints with the best ``metric``.

    With ``num_to_keep=1`` the only checkpoint left is the best eval's (the deliverable)."""
    check_choice("best_checkpoint_config", "mode", mode, ("max", "min"))
    check_int("best_checkpoint_config", "num_to_keep", num_to_keep, min_value=1)
    return CheckpointConfig(
        num_to_keep=num_to_keep, checkpoint_score_attribute=metric, checkpoint_score_order=mode
    )


class _Watch:
    """One ``Monitor`` per trial under one detector."""

    def __init__(self, metric: str, step_key: str, detector: Detector) -> None:
        self.metric, self.step_key, self.detector = metric, step_key, detector
        self.monitors: dict[str, Monitor] = {}

    def fired(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Record ``result`` for ``trial_id``; True iff the rule fires at this result."""
        if self.metric not in result:
            return False
        monitor = self.monitors.get(trial_id)
        if monitor is None:
            monitor = self.monitors[trial_id] = Monitor(self.detector)
        step = int(result.get(self.step_key, monitor.n_evals + 1))
        monitor.observe(Eval(step, as_score(result[self.metric])))
        return monitor.fired_now

    @property
    def verdicts(self) -> dict[str, Verdict]:
        return {trial_id: m.verdict for trial_id, m in self.monitors.items()}


class EvalStopStopper(Stopper):
    """A Tune Stopper: stop a trial when ``detector`` fires on its ``metric`` history."""

    def __init__(
        self,
        metric: str,
        mode: str | None = None,
        detector: Detector | str | None = None,
        *,
        step_key: str = STEP_KEY,
    ) -> None:
        self.metric = metric
        self.detector = resolve_detector(detector, mode, "EvalStopStopper")
        self._watch = _Watch(metric, step_key, self.detector)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return self._watch.fired(trial_id, result)

    def stop_all(self) -> bool:
        return False

    @property
    def verdicts(self) -> dict[str, Verdict]:
        return self._watch.verdicts


class EvalStopScheduler(TrialScheduler):
    """Wrap any Tune scheduler: forward every hook to ``base`` and return STOP for a trial when
    ``detector`` fires on its ``metric``; every other decision is the base scheduler's.

    ``metric``/``mode`` may also come from ``TuneConfig(metric=..., mode=...)``; when given here
    they are passed on to ``base`` as well (as ``ASHAScheduler(metric=..., mode=...)`` would).
    """

    def __init__(
        self,
        base: Any = None,
        metric: str | None = None,
        mode: str | None = None,
        detector: Detector | str | None = None,
        *,
        step_key: str = STEP_KEY,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.base = FIFOScheduler() if base is None else base  # type: ignore[no-untyped-call]
        if not isinstance(self.base, TrialScheduler):
            raise TypeError(
                "The 'base' parameter of EvalStopScheduler must be a Tune TrialScheduler. "
                f"Got {base!r} instead."
            )
        self._detector_arg = detector
        resolve_detector(detector, mode, "EvalStopScheduler")  # fail early on a bad spec or mode
        self._metric: str | None = None
        self._mode: str | None = None
        self._step_key = step_key
        self._watch: _Watch | None = None
        if (metric or mode) and not self.set_search_properties(metric, mode):
            raise ValueError(
                f"EvalStopScheduler got metric={metric!r}, mode={mode!r} but its base scheduler "
                f"{type(self.base).__name__} already has its own; give them in one place."
            )

    # ---- search properties ---------------------------------------------------------------------
    @property
    def metric(self) -> str | None:
        return self._metric

    @property
    def supports_buffered_results(self) -> bool:
        return bool(self.base.supports_buffered_results)

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        if (self._metric and metric) or (self._mode and mode):
            return False
        if not self.base.set_search_properties(metric, mode, **spec):
            return False
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def _watcher(self) -> _Watch:
        if self._watch is None:
            if not self._metric:
                raise ValueError(
                    "EvalStopScheduler has no metric: pass metric= (and mode=) to it or to TuneConfig."
                )
            detector = resolve_detector(self._detector_arg, self._mode, "EvalStopScheduler")
            self._watch = _Watch(self._metric, self._step_key, detector)
        return self._watch

    @property
    def detector(self) -> Detector:
        return self._watcher().detector

    @property
    def verdicts(self) -> dict[str, Verdict]:
        return self._watcher().verdicts

    # ---- hooks: forwarded; on_trial_result may turn into STOP ----------------------------------
    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._watcher()
        self.base.on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self.base.on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        decision = str(self.base.on_trial_result(tune_controller, trial, result))
        if self._watcher().fired(trial.trial_id, result):
            return str(TrialScheduler.STOP)
        return decision

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        self.base.on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self.base.on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        return self.base.choose_trial_to_run(tune_controller)

    def debug_string(self) -> str:
        rule = self._detector_arg if self._watch is None else self._watch.detector
        return f"EvalStop({rule!r}) over {self.base.debug_string()}"

    def save(self, checkpoint_path: str) -> None:
        self.base.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.base.restore(checkpoint_path)


__all__ = ["EvalStopScheduler", "EvalStopStopper", "best_checkpoint_config"]
