"""EvalStop as a Hugging Face ``TrainerCallback`` (works with ``Trainer`` and TRL's trainers).

    trainer.add_callback(EvalStopCallback(metric="eval_gold"))

The callback watches one logged metric: an ``eval_*`` metric from evaluation (``compute_metrics``,
TRL's ``eval_rewards/<func>/mean``) or a training-time one (TRL's ``rewards/<func>/mean``). After
each new value it runs the detector over the run's history. At every new best it asks the Trainer
to save a checkpoint and marks it as the best (``state.best_global_step``, and
``state.best_model_checkpoint`` once saved), so ``save_total_limit`` never rotates it away and
``load_best_model_at_end`` restores it. When the rule fires it saves the current state too, sets
``control.should_training_stop`` and writes the verdict to ``<output_dir>/evalstop.json``.
A run resumed from a checkpoint picks its eval history up from that file.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

from ..detectors import Detector, Eval, Monitor, Verdict
from ._common import (
    EvalHistory,
    as_score,
    describe,
    detector_mode,
    evals_from_rows,
    missing_extra,
    resolve_detector,
)
from ._remote import RemoteHistory, RemoteJob

try:
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without transformers
    raise missing_extra("transformers", "EvalStopCallback") from exc

#: The file, in ``args.output_dir``, that holds the verdict and the history.
RECORD_NAME = "evalstop.json"


def _eval_key(name: str) -> str:
    return name if name.startswith("eval_") else f"eval_{name}"


def check_training_args(args: Any, metric: str, mode: str) -> None:
    """Raise ValueError if the Trainer would pick its best checkpoint by another rule than ours."""
    chosen = getattr(args, "metric_for_best_model", None)
    if chosen is None:
        return
    if _eval_key(chosen) != metric:
        raise ValueError(
            f"EvalStopCallback watches {metric!r} but TrainingArguments.metric_for_best_model is "
            f"{chosen!r} (load_best_model_at_end defaults it to 'loss'), so the Trainer would keep "
            f"another checkpoint as the best. Set metric_for_best_model={metric!r} and "
            f"greater_is_better={mode == 'max'}, or leave both unset without load_best_model_at_end."
        )
    if bool(args.greater_is_better) != (mode == "max"):
        raise ValueError(
            f"EvalStopCallback reads {metric!r} with mode={mode!r} but TrainingArguments."
            f"greater_is_better is {args.greater_is_better!r}. Set greater_is_better={mode == 'max'}."
        )


class EvalStopCallback(TrainerCallback, ExportableState):
    """Stop a Trainer run when ``detector`` fires on ``metric``; keep the best checkpoint.

    ``detector`` is a Detector, a spec (``"evalstop:k=3,against=best"``) or None for the default
    rule; ``mode`` ("max"/"min") overrides the detector's. ``verdict`` holds the latest verdict.
    Remote mode: ``remote=RemoteJob(url, job_id, token)`` sends each value to the EvalStop
    service and obeys its decision (the service runs the job's rule; ``detector`` must be None).
    """

    def __init__(
        self,
        metric: str,
        detector: Detector | str | None = None,
        *,
        mode: str | None = None,
        record_name: str = RECORD_NAME,
        remote: RemoteJob | dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(metric, str) or not metric:
            raise ValueError(
                f"The 'metric' parameter of EvalStopCallback must be a metric name. Got {metric!r} instead."
            )
        self.metric = metric
        self.detector = resolve_detector(detector, mode, "EvalStopCallback")
        self.mode = detector_mode(self.detector)
        self.record_name = record_name
        self.remote = RemoteJob(**remote) if isinstance(remote, dict) else remote
        if self.remote is not None and detector is not None:
            raise ValueError(
                "EvalStopCallback: give a detector (local mode) or remote= (the service's rule), not both."
            )
        self.history = self._new_history(None)
        self._last_loss: float | None = None
        self._training = False
        self._missing_warned = False

    @property
    def verdict(self) -> Verdict:
        return self.history.verdict

    # ---- Trainer hooks -------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        check_training_args(args, self.metric, self.mode)
        if state.global_step == 0 or (self.remote is not None and not self.history.evals):
            self.history = self._new_history(args.output_dir)  # remote: the service has the history
        elif not self.history.evals:  # resumed from a checkpoint: the history so far is on disk
            self._reload(args, int(state.global_step))
        self._training = True

    def _new_history(self, output_dir: str | None) -> EvalHistory | RemoteHistory:
        if self.remote is None:
            return EvalHistory(self.detector)
        # No metric name is sent: the value is the job's watched metric as registered.
        if not output_dir:
            return RemoteHistory(self.remote)
        root = os.path.abspath(output_dir)
        return RemoteHistory(self.remote, None, lambda step: os.path.join(root, f"checkpoint-{step}"))

    def _reload(self, args: Any, up_to_step: int) -> None:
        path = os.path.join(args.output_dir or "", self.record_name)
        if not os.path.isfile(path):
            return
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        if record.get("metric") != self.metric:
            return
        for ev in evals_from_rows(record.get("evals", [])):
            if ev.step <= up_to_step:
                self.history.add(ev)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._training = False
        if not self.history.evals:
            warnings.warn(
                f"EvalStopCallback never saw the metric {self.metric!r}: no stopping rule was applied. "
                f"Check the name against the logged metrics.",
                stacklevel=2,
            )
        self._write_record(args, state)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        logs = logs or {}
        if "loss" in logs:
            self._last_loss = as_score(logs["loss"])
        if self.metric in logs:
            self._observe(args, state, control, logs[self.metric])

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        metrics = metrics or {}
        if self.metric in metrics:
            self._observe(args, state, control, metrics[self.metric])
        elif self.metric.startswith("eval_") and not self._missing_warned:
            self._missing_warned = True
            warnings.warn(
                f"EvalStopCallback: metric {self.metric!r} is not in the evaluation metrics "
                f"{sorted(metrics)}; this eval is ignored.",
                stacklevel=2,
            )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        best = self._best_checkpoint(args)
        if best is not None:
            state.best_model_checkpoint = best
        self._write_record(args, state)

    # ---- the decision --------------------------------------------------------------------------
    def _observe(self, args: Any, state: Any, control: Any, value: Any) -> None:
        if not self._training:
            return  # evaluate() called outside train(): not part of the run's curve
        step = int(state.global_step)
        progress = step / state.max_steps if state.max_steps else None
        if self.history.add(Eval(step, as_score(value), progress, self._last_loss)) is None:
            return  # this step was already seen (on_log then on_evaluate carry the same metrics)
        if self.history.last_is_best:
            control.should_save = True
            if args.metric_for_best_model is None:  # else the Trainer tracks the same best itself
                state.best_global_step = step
                state.best_metric = self.verdict.best_score
        if self.history.fired_now:
            control.should_save = True
            control.should_training_stop = True
        self._write_record(args, state)

    def _best_checkpoint(self, args: Any) -> str | None:
        step = self.verdict.best_step
        if step is None:
            return None
        path = os.path.join(args.output_dir, f"checkpoint-{step}")
        return path if os.path.isdir(path) else None

    def _write_record(self, args: Any, state: Any) -> None:
        if not state.is_world_process_zero or not args.output_dir:
            return
        record = {"metric": self.metric, "mode": self.mode, **self.history.record()}
        record["best_checkpoint"] = self._best_checkpoint(args)
        os.makedirs(args.output_dir, exist_ok=True)
        path = os.path.join(args.output_dir, self.record_name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
        os.replace(path + ".tmp", path)

    # ---- checkpointed callback state (restore_callback_states_from_checkpoint) -----------------
    def state(self) -> dict[str, Any]:
        """What the Trainer saves in each checkpoint: the arguments, the evals so far and the
        rule's ``Monitor`` (its JSON form), so a resumed run decides as if never stopped."""
        remote = None
        if self.remote is not None:
            job = self.remote
            remote = {"url": job.url, "job_id": job.job_id, "timeout_s": job.timeout_s}
        attributes: dict[str, Any] = {"history_rows": self.history.record()["evals"]}
        if isinstance(self.history, EvalHistory):
            attributes["monitor_state"] = self.history.monitor.to_json()
        return {
            "args": {
                "metric": self.metric,
                "detector": None if remote else describe(self.detector),
                "mode": self.mode,
                "record_name": self.record_name,
                "remote": remote,
            },
            "attributes": attributes,
        }

    @property
    def history_rows(self) -> list[list[Any]]:
        return list(self.history.record()["evals"])

    @history_rows.setter
    def history_rows(self, rows: list[list[Any]]) -> None:
        """Restore from the saved rows (checkpoints without ``monitor_state`` fold them again)."""
        if self.remote is not None:
            return  # the service holds the history
        self.history = EvalHistory(self.detector)
        for ev in evals_from_rows(rows):
            self.history.add(ev)

    @property
    def monitor_state(self) -> dict[str, Any] | None:
        return self.history.monitor.to_json() if isinstance(self.history, EvalHistory) else None

    @monitor_state.setter
    def monitor_state(self, data: dict[str, Any] | None) -> None:
        """Restore the rule's state as saved (set after ``history_rows``, which it replaces)."""
        if self.remote is not None or data is None or not isinstance(self.history, EvalHistory):
            return
        self.history.monitor = Monitor.from_json(data, self.detector)


__all__ = ["RECORD_NAME", "EvalStopCallback", "check_training_args"]
