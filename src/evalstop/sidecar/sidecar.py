"""The sidecar's loop: read new evals from the log, decide with the job's ``Monitor``, keep the
best checkpoint, stop the target when the rule fires.

Each eval found in the log is one decision and one line. The monitor is the same one ``evalstop
replay`` drives (every eval folded, in step order; a step not after the last one is ignored), so
the verdicts equal replay's on the same curve. A log-only sidecar cannot ask the framework for an
eval, a denser eval or a confirmation: it decides on the evals the framework chose to run.
"""

from __future__ import annotations

import fnmatch
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from evalstop.detectors import Detector, Eval, Monitor, format_spec
from evalstop.logs import (
    JsonlReader,
    LogReader,
    MlflowClientReader,
    MlflowFileReader,
    ScoreRecord,
    TensorBoardReader,
    TrainerStateReader,
    WandbReader,
)

from .keeper import BestKeeper, Ready
from .targets import Target

#: The exit status when evalstop stopped the training (its own status is then ours to ignore).
STOPPED_EXIT = 3
GLOB_CHARS = "*?["


@dataclass
class Options:
    metric: str
    detector: Detector
    log: str
    logdir: Path
    checkpoint_dir: Path | None = None
    checkpoints: str | None = None
    ready: Ready | None = None
    step_key: str = "step"
    values_key: str | None = None
    poll_s: float = 1.0
    grace_s: float = 30.0
    log_timeout_s: float = 120.0
    shadow: bool = False
    job_id: str = "run"
    said: set[str] = field(default_factory=set)
    #: an MLflow run read through its tracking server or database: (tracking URI, run id)
    mlflow_run: tuple[str, str] | None = None


def make_reader(options: Options, metric: str) -> LogReader:
    if options.log == "tensorboard":
        return TensorBoardReader(options.logdir, metric, recursive=True)
    if options.log == "jsonl":
        return JsonlReader(options.logdir, metric, step_key=options.step_key, values_key=options.values_key)
    if options.log == "mlflow" and options.mlflow_run is not None:
        return MlflowClientReader(*options.mlflow_run, metric)
    if options.log == "mlflow":
        return MlflowFileReader(options.logdir, metric)
    if options.log == "wandb":
        return WandbReader(options.logdir, metric, step_key=options.step_key)
    name = "eval_" + metric[5:] if metric.startswith("eval/") else metric  # the Trainer's own key
    return TrainerStateReader(options.logdir, name)


class Sidecar:
    """``run()`` until the target ends; returns its status, or ``STOPPED_EXIT`` after a stop."""

    def __init__(self, options: Options, target: Target, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.o, self.target, self.out, self.clock = options, target, out or sys.stderr, clock
        self.monitor = Monitor(options.detector)
        self.metric = options.metric if not any(c in options.metric for c in GLOB_CHARS) else None
        self.reader = make_reader(options, self.metric or "")
        self.keeper: BestKeeper | None = None
        if None not in (options.checkpoint_dir, options.checkpoints, options.ready):
            assert options.checkpoint_dir and options.checkpoints and options.ready
            self.keeper = BestKeeper(options.checkpoint_dir, options.checkpoints, options.ready,
                                     metric=options.metric, on_event=self.say)
        self.started = clock()
        self.first_eval_at: float | None = None
        self.stopped = False

    # -- output ----------------------------------------------------------------------------
    def say(self, line: str) -> None:
        print(f"evalstop watch: {line}", file=self.out, flush=True)

    def say_once(self, key: str, line: str) -> None:
        if key not in self.o.said:
            self.o.said.add(key)
            self.say(line)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> int:
        self.say(self.describe())
        while True:
            status = self.target.poll()
            self.tick()
            if status is not None:
                return self.finish(status)
            if self.stopped:
                return self.finish(None)
            time.sleep(self.o.poll_s)

    def describe(self) -> str:
        best = (f"best/ in {self.o.checkpoint_dir} ({self.o.checkpoints})" if self.keeper else
                "no best/ (no --checkpoint-dir)")
        mode = "shadow (report only)" if self.o.shadow else f"stop with grace {self.o.grace_s:g} s"
        where = self.reader.location
        return (f"watching {self.target.description}: {self.o.metric} in {self.o.log} log {where}; "
                f"rule {format_spec(self.monitor.detector)}; {mode}; {best}")

    def tick(self) -> None:
        for record in self.new_records():
            self.decide(record)
            if self.stopped:
                return
        if self.keeper is not None:
            self.keeper.tick()
        self.diagnose()

    def new_records(self) -> list[ScoreRecord]:
        if self.metric is None:
            self.reader.read()
            matches = fnmatch.filter(self.reader.names(), self.o.metric)
            if len(matches) > 1:
                self.say_once("ambiguous", f"several tags match {self.o.metric!r}: {', '.join(matches)}; "
                              "pass --metric with the one to watch")
            if len(matches) != 1:
                return []
            self.metric = matches[0]
            self.say(f"watching {self.metric!r} (the one tag matching {self.o.metric!r})")
            self.reader = make_reader(self.o, self.metric)
            if self.keeper is not None:
                self.keeper.metric = self.metric
        return self.reader.read()

    def decide(self, record: ScoreRecord) -> None:
        if not self.monitor.accepts(record.step):
            return
        if self.first_eval_at is None:
            self.first_eval_at = self.clock()
        verdict = self.monitor.observe(Eval(record.step, record.value))
        word = "STOP" if self.monitor.fired_now else "continue"
        best = ("" if verdict.best_step is None
                else f"best step {verdict.best_step} ({verdict.best_score:.6g}); ")
        self.say(f"step {record.step} {self.metric}={record.value:.6g}: {word} ({best}{verdict.reason})")
        if verdict.best_step == record.step and self.keeper is not None:
            self.keeper.offer(record.step, record.value)
        if self.monitor.fired_now:
            self.act()

    def act(self) -> None:
        if self.o.shadow:
            self.say(f"--shadow: would stop {self.target.description} now; not acting")
            return
        if self.keeper is not None:
            self.keeper.tick()
            if self.keeper.kept is not None:
                self.target.pin(str(self.keeper.kept.path))
        self.say(f"stopping {self.target.description}: {self.target.stop(self.o.grace_s)}")
        self.stopped = True

    # -- bad input, said once --------------------------------------------------------------
    def diagnose(self) -> None:
        waited = self.clock() - self.started
        if waited < self.o.log_timeout_s:
            return
        if not self.reader.exists():
            self.say_once("log", f"no {self.o.log} log at {self.reader.location} after {waited:.0f} s; still "
                          "waiting (is the framework's logging on? see docs/integrations.md)")
        elif self.monitor.n_evals == 0 and self.first_eval_at is None:
            self.say_once("metric", self.no_metric_line(waited))
        k, first = self.keeper, self.first_eval_at
        late = first is not None and self.clock() - first >= self.o.log_timeout_s
        if k is not None and late and not k.matched_any and not k.saved_steps():
            self.say_once("checkpoints", self.no_checkpoint_line())

    def no_metric_line(self, waited: float) -> str:
        names = self.reader.names()
        shown = ", ".join(names[:30]) + (f" (and {len(names) - 30} more)" if len(names) > 30 else "")
        return (f"no {self.o.metric!r} in {self.reader.location} after {waited:.0f} s; the log has "
                f"{shown or 'no metrics yet'}; pass --metric with one of them")

    def no_checkpoint_line(self) -> str:
        assert self.keeper is not None
        d = self.keeper.dir
        try:
            held = sorted(p.name for p in d.iterdir())
        except OSError:
            return f"--checkpoint-dir {d} does not exist; best/ cannot be kept"
        shown = ", ".join(held[:20]) or "nothing"
        return (f"--checkpoints {self.keeper.pattern!r} matches nothing in {d} (it holds: {shown}); "
                "best/ cannot be kept until it does")

    # -- the end ---------------------------------------------------------------------------
    def finish(self, status: int | None) -> int:
        if status is not None and not self.stopped:
            self.tick()  # what the job wrote before it ended
        if self.monitor.n_evals == 0 and not self.stopped:
            what = (self.no_metric_line(self.clock() - self.started) if self.reader.exists()
                    else f"no {self.o.log} log at {self.reader.location}")
            self.say(f"the training command exited with status {status} before its first eval: {what}")
            return int(status or 0)
        if self.keeper is not None and not self.keeper.matched_any and self.monitor.n_evals:
            self.say_once("checkpoints", self.no_checkpoint_line())
        v = self.monitor.verdict
        kept = self.keeper.kept if self.keeper is not None else None
        where = f"; best/ holds step {kept.step}" if kept is not None else ""
        if self.stopped:
            self.say(f"stopped at step {v.stop_step}; best step {v.best_step}{where}; exit {STOPPED_EXIT}")
            return STOPPED_EXIT
        self.say(f"the training command exited with status {status} after {self.monitor.n_evals} evals; "
                 f"{'the rule fired (shadow)' if v.stopped else 'the rule did not fire'}{where}")
        return int(status or 0)

    def result(self) -> dict[str, Any]:
        """The verdict as one ``evalstop replay`` output row."""
        v = self.monitor.verdict
        return {"job_id": self.o.job_id, "stopped": v.stopped, "stop_step": v.stop_step,
                "best_step": v.best_step, "best_score": v.best_score, "reason": v.reason,
                "n_invalid": v.n_invalid}
