"""EvalStop as a Hugging Face ``TrainerCallback`` (works with ``Trainer`` and TRL's trainers).

    trainer.add_callback(EvalStopCallback(metric="eval_gold"))

The callback watches one logged metric: an ``eval_*`` metric from evaluation (``compute_metrics``,
TRL's ``eval_rewards/<func>/mean``) or a training-time one (TRL's ``rewards/<func>/mean``). After
each new value it runs the detector over the run's history. At every new best it asks the Trainer
to save a checkpoint and marks it as the best (``state.best_global_step``, and
``state.best_model_checkpoint`` once saved), so ``save_total_limit`` never rotates it away and
``load_best_model_at_end`` restores it. When the rule fires it saves the current state too, sets
``control.should_training_stop`` and writes the verdict to ``<output_dir>/evalstop.json``.

Names follow HF: ``metric="gold"`` also matches the evaluation's ``eval_gold`` (as
``metric_for_best_model="gold"`` does), and a metric whose name ends in ``loss`` is read
lower-is-better unless ``mode`` or the detector's spec says otherwise.

A run resumed from a checkpoint gets its eval history back up to that checkpoint (from the
checkpoint's callback state, else from ``evalstop.json``) and keeps watching. Resuming past the
step where the rule fired is refused at train begin, unless ``after_stop="restart"`` (watch the
resumed run afresh). Misconfiguration fails early: an ``eval_*`` metric with
``eval_strategy="no"`` at train begin; a metric missing from an evaluation round (of every eval
dataset) or, with no evaluations, from the training logs, at the next step. Several callbacks
share ``evalstop.json``: it holds one record per metric (``"metrics"``), and its top level is the
record of the metric that stopped the run (else the first metric by name).

Standard error: when the evaluation also logs ``<metric>_stderr`` (``compute_metrics`` can return
the sd of the per-example scores over sqrt(n) when the metric is their mean:
``mean_and_stderr(name, values)`` builds both), the eval carries it and the rules that measure
noise (``cusum``, ``noise-aware``) use it for that eval. For the eval loss, which the Trainer
reports as a mean over the eval set without its spread, a callback added with
``bind(trainer, loss_stderr=True)`` estimates it from the per-batch losses of each evaluation
(``_hf_stderr.BatchSpread``). Off by default: over a *fixed* eval set the spread between examples
is not eval-to-eval noise (docs/integrations.md).

Eval cadence: with ``cadence="adaptive:every=3"`` (or ``"every:N"``, or a policy object) the
callback decides when the Trainer evaluates. ``eval_steps`` is the sparse base: the policy's
quiet gap (``every``) spans ``eval_steps``, so an opportunity comes every ``eval_steps / every``
steps and the callback sets ``control.should_evaluate`` only at the step the monitor's
``next_eval()`` names (and clears it elsewhere). Needs ``eval_strategy="steps"``. In remote
mode the ``next_eval`` hint of the service's reply is followed the same way: at its ``step``
when the job was registered with an ``eval_interval``, else ``after`` opportunities spaced by
``cadence`` (given for the spacing) and ``eval_steps``; a reply without a usable hint leaves the
Trainer's schedule alone.

Rewind instead of stop: ``on_detect=OnDetect("rewind", max_rewinds=1, correction="kl_coef*=2")``,
with the callback added by ``callback.bind(trainer)`` (a ``kl_coef`` correction sets the trainer's
``beta``; ``ref=best`` loads the best checkpoint into its reference model, the new KL anchor).
At a detection with a rewind left, the callback loads the best checkpoint into the live
model, optimizer and scheduler, applies the correction (``_trainer_rewind.py``) and training goes on;
``rewinds`` lists what each rewind did, and ``evalstop.json`` the decision log. A correction the
trainer cannot take fails at train begin; a detection without a saved best checkpoint stops the
run (with a warning) instead of rewinding. In remote mode the policy is the job's on the service
(registered with ``on_detect``): a ``rewind`` reply makes the callback do the same in-process
rewind, to the checkpoint and with the correction the reply names, and report the next evals as
the new attempt; a rewind it cannot do stops the run at the best checkpoint (with a warning).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from typing import Any

from ..detectors import (
    CadencePolicy,
    Detector,
    Eval,
    Monitor,
    NextEval,
    OnDetect,
    Verdict,
    format_cadence,
    parse_cadence,
)
from ._common import (
    EvalHistory,
    as_score,
    describe,
    detector_mode,
    evals_from_rows,
    missing_extra,
    resolve_detector,
)
from ._hf_stderr import BatchSpread, mean_and_stderr
from ._remote import RemoteHistory, RemoteJob

try:
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without transformers
    raise missing_extra("transformers", "EvalStopCallback") from exc

from ._trainer_rewind import RewindRefused, check_checkpoint, check_correction, rewind_in_place  # needs torch
from ._trainer_rewind_ordered import rewind_remote

#: The file, in ``args.output_dir``, that holds the verdict and the history.
RECORD_NAME = "evalstop.json"


def _loss_spread(trainer: Any, keys: tuple[str, ...]) -> BatchSpread | None:
    """When the watched metric is the eval loss (a mean over the eval set), record its
    per-batch spread for a standard error (``_hf_stderr``); otherwise None."""
    if not any(k.startswith("eval_") and k.endswith("loss") for k in keys):
        return None
    spread = BatchSpread()
    spread.install(trainer)
    return spread


def _eval_key(name: str) -> str:
    return name if name.startswith("eval_") else f"eval_{name}"


def _no_eval(args: Any) -> bool:
    strategy = getattr(args, "eval_strategy", None) or getattr(args, "evaluation_strategy", None)
    return str(getattr(strategy, "value", strategy)) == "no"


def infer_mode(metric: str, detector: Detector | str | None, mode: str | None) -> str | None:
    """HF's rule: a metric named ``...loss`` is lower-is-better, unless a mode is given (here or in
    the detector's spec)."""
    if mode is not None or not metric.endswith("loss"):
        return mode
    if isinstance(detector, str) and "mode=" in detector:
        return None
    if isinstance(detector, Detector) and getattr(detector, "mode", "max") != "max":
        return None
    return "min"


def check_training_args(args: Any, metric: str, mode: str) -> None:
    """Raise ValueError if the Trainer would pick its best checkpoint by another rule than ours."""
    chosen = getattr(args, "metric_for_best_model", None)
    if chosen is None:
        return
    if _eval_key(chosen) != _eval_key(metric):
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
        after_stop: str = "refuse",
        cadence: CadencePolicy | str | None = None,
        on_detect: OnDetect | dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(metric, str) or not metric:
            raise ValueError(
                f"The 'metric' parameter of EvalStopCallback must be a metric name. Got {metric!r} instead."
            )
        if after_stop not in ("refuse", "restart"):
            raise ValueError(f"The 'after_stop' parameter of EvalStopCallback must be 'refuse' or 'restart'. "
                             f"Got {after_stop!r} instead.")
        self.metric = metric
        self.after_stop = after_stop
        self.on_detect = OnDetect.from_json(on_detect)
        #: what each rewind did (checkpoint, steps, knobs before and after); the bound trainer
        self.rewinds: list[dict[str, Any]] = []
        self._trainer: Any = None
        #: the logged names that carry the metric: itself, and its ``eval_`` form as HF writes it
        self._keys = (metric,) if metric.startswith("eval_") else (metric, f"eval_{metric}")
        self.detector = resolve_detector(detector, infer_mode(metric, detector, mode), "EvalStopCallback")
        self.mode = detector_mode(self.detector)
        self.record_name = record_name
        self.remote = RemoteJob(**remote) if isinstance(remote, dict) else remote
        if self.remote is not None and self.on_detect.rewinds:
            raise ValueError("EvalStopCallback: in remote mode the on-detect policy is the job's on the "
                             "service (register the job with on_detect='rewind'); do not pass on_detect.")
        if self.remote is not None and detector is not None:
            raise ValueError(
                "EvalStopCallback: give a detector (local mode) or remote= (the service's rule), not both."
            )
        self.cadence = parse_cadence(cadence) if isinstance(cadence, str) else cadence
        self._eval_interval: int | None = None
        self.history = self._new_history(None)
        self._last_loss: float | None = None
        self._last_stderr: float | None = None
        self._spread: BatchSpread | None = None  # the eval loss's per-batch spread, when bound
        self._training = False
        self._eval_round: tuple[int, bool, list[str]] | None = None  # (step, matched, keys seen)
        self._run_id = ""

    @property
    def verdict(self) -> Verdict:
        return self.history.verdict

    def bind(self, trainer: Any, *, loss_stderr: bool = False) -> EvalStopCallback:
        """Add this callback to ``trainer`` and keep the trainer (a ``kl_coef`` correction sets
        its ``beta``). ``loss_stderr``: when the watched metric is the eval loss, estimate its
        standard error from the per-batch losses of each evaluation (``_hf_stderr``)."""
        trainer.add_callback(self)
        self._trainer = trainer
        self._spread = _loss_spread(trainer, self._keys) if loss_stderr else None
        return self

    # ---- Trainer hooks -------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        check_training_args(args, self.metric, self.mode)
        if _no_eval(args) and self.metric.startswith("eval_"):
            raise ValueError(
                f"EvalStopCallback watches the evaluation metric {self.metric!r}, but "
                f"TrainingArguments.eval_strategy is 'no', so there will be no evaluations. Set "
                f"eval_strategy='steps' (with eval_steps) or 'epoch'."
            )
        if self.on_detect.rewinds:
            check_correction(self.on_detect.parsed, self._trainer)
        step = int(state.global_step)
        if step == 0 or (self.remote is not None and not self.history.evals):
            self.history = self._new_history(args.output_dir)  # remote: the service has the history
        elif self.remote is None:  # resumed from a checkpoint: the history up to it, and no further
            self._resume(args, step)
        self._eval_round = None
        # Callbacks of one train() call share its TrainerState: entries of evalstop.json written
        # under another run id are from an earlier run and are dropped when this run writes.
        self._run_id = f"{os.getpid()}:{id(state)}"
        self._training = True
        self._start_cadence(args, state)

    def _resume(self, args: Any, step: int) -> None:
        kept = [ev for ev in self.history.evals if ev.step <= step] or self._saved_evals(args, step)
        self.history = EvalHistory(self.detector, policy=self.on_detect)
        for ev in kept:
            self.history.add(ev)
        v = self.verdict
        if not v.stopped:
            return
        if self.after_stop == "restart":
            self.history = EvalHistory(self.detector, policy=self.on_detect)
            warnings.warn(f"EvalStopCallback: the rule stopped this run at step {v.stop_step}; "
                          f"after_stop='restart', so it watches the resumed run afresh.", stacklevel=2)
            return
        raise ValueError(
            f"EvalStopCallback: the rule stopped this run at step {v.stop_step} ({v.reason}); resuming "
            f"from step {step} would train on without a stopping rule. Resume from a checkpoint before "
            f"step {v.stop_step} (the best is checkpoint-{v.best_step}), or pass after_stop='restart' "
            f"to watch the resumed run afresh."
        )

    def _new_history(self, output_dir: str | None) -> EvalHistory | RemoteHistory:
        if self.remote is None:
            return EvalHistory(self.detector, policy=self.on_detect)
        # No metric name is sent: the value is the job's watched metric as registered.
        if not output_dir:
            return RemoteHistory(self.remote)
        root = os.path.abspath(output_dir)
        return RemoteHistory(self.remote, None, lambda step: os.path.join(root, f"checkpoint-{step}"))

    def _saved_evals(self, args: Any, up_to_step: int) -> list[Eval]:
        record = self._read_record(args).get("metrics", {}).get(self.metric, {})
        return [ev for ev in evals_from_rows(record.get("evals", [])) if ev.step <= up_to_step]

    def _read_record(self, args: Any) -> dict[str, Any]:
        path = os.path.join(args.output_dir or "", self.record_name)
        if not os.path.isfile(path):
            return {}
        with open(path, encoding="utf-8") as f:
            record: dict[str, Any] = json.load(f)
        if "metrics" not in record and "metric" in record:  # one callback's record, before merging
            record["metrics"] = {record["metric"]: record}
        return record

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._check_round()
        self._training = False
        if not self.history.evals:
            warnings.warn(
                f"EvalStopCallback never saw the metric {self.metric!r}: no stopping rule was applied. "
                f"Check the name against the logged metrics.",
                stacklevel=2,
            )
        self._write_record(args, state)

    def _key_in(self, logs: dict[str, Any]) -> str | None:
        return next((k for k in self._keys if k in logs), None)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        logs = logs or {}
        if "loss" in logs:
            self._last_loss = as_score(logs["loss"])
        key = self._key_in(logs)
        if key is not None:
            self._last_stderr = self._metric_stderr(logs, key)
            self._observe(args, state, control, logs[key], kwargs)
        elif "loss" in logs and _no_eval(args) and self._training and not self.history.evals:
            raise ValueError(
                f"EvalStopCallback: metric {self.metric!r} is not in the training logs {sorted(logs)}, and "
                f"eval_strategy is 'no', so no evaluation will log it. Watch one of the logged names."
            )

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        metrics = metrics or {}
        key = self._key_in(metrics)
        step = int(state.global_step)
        # One round per step: with several eval datasets, each is evaluated (and reported) alone.
        matched, seen = (False, []) if self._eval_round is None or self._eval_round[0] != step else \
            self._eval_round[1:]
        self._eval_round = (step, matched or key is not None, [*seen, *sorted(metrics)])
        if key is not None:
            self._last_stderr = self._metric_stderr(metrics, key)
            self._observe(args, state, control, metrics[key], kwargs)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._check_round()
        self._follow_cadence(state, control)

    def _check_round(self) -> None:
        """An evaluation round that never carried the metric is a misconfiguration: fail now."""
        if self._eval_round is None or self._eval_round[1] or not self._training:
            return
        step, _, seen = self._eval_round
        names = " or ".join(repr(k) for k in dict.fromkeys((self.metric, _eval_key(self.metric))))
        raise ValueError(
            f"EvalStopCallback: metric {names} is not among the "
            f"evaluation metrics at step {step}: {sorted(set(seen))}. Set metric= to one of them."
        )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        best = self._best_checkpoint(args)
        if best is not None:
            state.best_model_checkpoint = best
        self._write_record(args, state)

    def _metric_stderr(self, logs: dict[str, Any], key: str) -> float | None:
        """The logged ``<key>_stderr``, else for the eval loss the estimate from its batches."""
        stderr = self._stderr_in(logs, key)
        if stderr is None and self._spread is not None and key.startswith("eval_") and key.endswith("loss"):
            stderr = self._spread.take()
        return stderr

    @staticmethod
    def _stderr_in(logs: dict[str, Any], key: str) -> float | None:
        """The metric's standard error when the evaluation logs it as ``<key>_stderr`` (e.g.
        ``compute_metrics`` returning the sd of per-example scores over sqrt(n) for a mean);
        None if absent, not finite or not positive."""
        value = logs.get(f"{key}_stderr")
        try:
            stderr = None if value is None else float(value)
        except (TypeError, ValueError):
            return None
        return stderr if stderr is not None and math.isfinite(stderr) and stderr > 0 else None

    # ---- the eval cadence ------------------------------------------------------------------------
    def _start_cadence(self, args: Any, state: Any) -> None:
        if self.cadence is None:
            return
        strategy = getattr(args, "eval_strategy", None)
        strategy = str(getattr(strategy, "value", strategy))
        if strategy != "steps":
            raise ValueError(f"EvalStopCallback: cadence={self.cadence.name!r} needs eval_strategy='steps' "
                             f"(eval_steps is its sparse base). Got {strategy!r}.")
        base = args.eval_steps or args.logging_steps
        base = int(base) if base >= 1 else max(1, math.ceil(state.max_steps * base))
        gap = self.cadence.first
        if base % gap:
            raise ValueError(f"EvalStopCallback: eval_steps={base} must be a multiple of the cadence's "
                             f"quiet gap {gap} (an eval opportunity every eval_steps / {gap} steps).")
        self._eval_interval = base // gap
        if isinstance(self.history, EvalHistory):
            self.history.monitor.cadence = self.cadence
            self.history.monitor.eval_interval = self._eval_interval

    @property
    def next_eval(self) -> NextEval | None:
        """When the next eval is worth running (None: no cadence, or a remote reply without a
        hint). A hint in opportunities only (a service's) gets its step from ``eval_steps``."""
        if self.cadence is None and self.remote is None:
            return None
        hint = self.history.next_eval()
        if hint is None or hint.step is not None or self._eval_interval is None:
            return hint
        last = self.history.evals[-1].step if self.history.evals else 0
        return NextEval(hint.after, last + hint.after * self._eval_interval, hint.elevated, hint.done)

    def _follow_cadence(self, state: Any, control: Any) -> None:
        if not self._training:
            return
        hint = self.next_eval
        if hint is None or hint.step is None:
            return  # no hint: the Trainer's own schedule stands
        control.should_evaluate = not hint.done and int(state.global_step) >= hint.step

    # ---- the decision --------------------------------------------------------------------------
    def _observe(self, args: Any, state: Any, control: Any, value: Any, objects: dict[str, Any]) -> None:
        if not self._training:
            return  # evaluate() called outside train(): not part of the run's curve
        step = int(state.global_step)
        progress = step / state.max_steps if state.max_steps else None
        score = as_score(value)
        if self.history.add(Eval(step, score, progress, self._last_loss, self._last_stderr)) is None:
            return  # this step was already seen (on_log then on_evaluate carry the same metrics)
        if not math.isfinite(score):  # as the Optuna pruner does: say so, never stop on it
            warnings.warn(f"EvalStopCallback: metric {self.metric!r} is {value!r} at step {step}; "
                          "the rule skips it (a missing or non-finite eval never stops a run).", stacklevel=2)
        if self.history.last_is_best:
            control.should_save = True
            if args.metric_for_best_model is None:  # else the Trainer tracks the same best itself
                state.best_global_step = step
                state.best_metric = self.verdict.best_score
        if self.history.fired_now and not self._rewound(args, objects):
            control.should_save = True
            control.should_training_stop = True
        if isinstance(self.history, RemoteHistory):
            self._obey_rewind(args, control, objects)
        self._write_record(args, state)

    def _obey_rewind(self, args: Any, control: Any, objects: dict[str, Any]) -> None:
        """Remote mode: do the rewind the service's reply asked for, if any (``rewind_remote``)."""
        assert isinstance(self.history, RemoteHistory)
        order = self.history.take_rewind()
        if order is None:
            return
        if order.resubmit:  # the service stops this run and starts the next attempt itself
            warnings.warn(f"EvalStopCallback: the service resubmits this job from {order.checkpoint_uri} "
                          f"with {order.correction}; this run stops.", stacklevel=2)
            control.should_save = True
            control.should_training_stop = True
            return
        try:
            done = rewind_remote(order, args.output_dir, objects, self._trainer)
        except RewindRefused as exc:
            warnings.warn(f"{exc} Stopping at the best checkpoint instead.", stacklevel=2)
            control.should_save = True
            control.should_training_stop = True
            return
        self.history.rewound(order, resume_after=self.history.evals[-1].step)  # HF's step goes on
        self.rewinds.append({**done, **order.to_json()})
        warnings.warn(f"EvalStopCallback rewound the run at step {order.step} ({order.reason}) to "
                      f"{done['checkpoint']}, correction {order.correction}, as the service asked: {done}.",
                      stacklevel=2)

    def _rewound(self, args: Any, objects: dict[str, Any]) -> bool:
        """At a detection: rewind in place if the policy has a rewind left; whether it did."""
        monitor = getattr(self.history, "monitor", None)
        if monitor is None or monitor.action != "rewind":
            return False
        try:
            checkpoint = check_checkpoint(args.output_dir, monitor.verdict.best_step)
            done = rewind_in_place(checkpoint, self.on_detect.parsed, objects.get("model"),
                                   objects.get("optimizer"), objects.get("lr_scheduler"), self._trainer)
        except RewindRefused as exc:
            monitor.stop_instead()
            warnings.warn(f"{exc} Stopping at the best checkpoint instead.", stacklevel=2)
            return False
        rewind = monitor.rewind()
        self.rewinds.append({**done, "number": rewind.number, "step": rewind.step, "to_step": rewind.to_step,
                             "correction": rewind.correction, "reason": rewind.reason})
        warnings.warn(f"EvalStopCallback rewound the run at step {rewind.step} ({rewind.reason}) to "
                      f"{checkpoint}, correction {rewind.correction}: {done}.", stacklevel=2)
        return True

    def _best_checkpoint(self, args: Any) -> str | None:
        step = self.verdict.best_step
        if step is None:
            return None
        path = os.path.join(args.output_dir, f"checkpoint-{step}")
        return path if os.path.isdir(path) else None

    def _write_record(self, args: Any, state: Any) -> None:
        if not state.is_world_process_zero or not args.output_dir:
            return
        mine = {"metric": self.metric, "mode": self.mode, **self.history.record()}
        mine["best_checkpoint"] = self._best_checkpoint(args)
        mine["run_id"] = self._run_id
        mine["rewinds"] = self.rewinds
        others = {k: r for k, r in self._read_record(args).get("metrics", {}).items()
                  if r.get("run_id") == self._run_id}
        metrics = {**others, self.metric: mine}
        stopped = sorted((r for r in metrics.values() if r.get("decision") == "stop"),
                         key=lambda r: (r.get("stop_step") or 0, r["metric"]))
        top = stopped[0] if stopped else metrics[min(metrics)]
        os.makedirs(args.output_dir, exist_ok=True)
        path = os.path.join(args.output_dir, self.record_name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({**top, "metrics": metrics}, f, indent=1)
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
                "after_stop": self.after_stop,
                **({"cadence": format_cadence(self.cadence)} if self.cadence is not None else {}),
                "on_detect": self.on_detect.to_json(),
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
        self.history = EvalHistory(self.detector, policy=self.on_detect)
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


__all__ = ["RECORD_NAME", "EvalStopCallback", "check_training_args", "mean_and_stderr"]
