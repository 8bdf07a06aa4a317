"""``evalstop watch``: protect a training run without changing its code.

    evalstop watch --framework trl --checkpoint-dir out -- python train.py --output_dir out
    evalstop watch --framework verl --logdir tensorboard_log/p/e --checkpoint-dir checkpoints/p/e --pid 4242

Exit status: the training command's own (128 + N after signal N) when it ends by itself;
``3`` when evalstop stopped it; ``2`` for bad options; ``0`` for ``--pid`` and engine jobs that
end by themselves (their status is not the sidecar's to read).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from evalstop.detectors import DEFAULT_SPEC

from .presets import LOGS, PRESETS, Preset, Settled, default_logdir, default_step_key

DEFAULT_RAY_ADDRESS = "http://127.0.0.1:8265"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1] if __doc__ else None
    what = parser.add_argument_group("what to watch")
    what.add_argument("--framework", choices=sorted(PRESETS), help="set metric, log and checkpoint layout "
                      "from the framework's own source (docs/integrations.md)")
    what.add_argument("--metric", help="the eval metric's tag or key (a glob picks the one match); "
                      "overrides the preset")
    what.add_argument("--mode", choices=("max", "min"),
                      help="higher or lower is better (default: the preset's, else the rule's)")
    what.add_argument("--log", choices=LOGS, help="the log format (default: the preset's, else tensorboard)")
    what.add_argument("--logdir", metavar="PATH", help="the log: TensorBoard dir (searched recursively), "
                      "JSON-lines file, MLflow file store or run dir, trainer_state.json or output_dir, "
                      "W&B run dir or .wandb file")
    what.add_argument("--step-key", help="jsonl, wandb: the step field (default: step for jsonl; for "
                      "wandb _step, train/global_step with --framework trl or hf)")
    what.add_argument("--values-key", help="jsonl: the object holding the metrics (veRL: data)")
    what.add_argument("--mlflow-run", metavar="RUN_ID", help="mlflow: read this run through its tracking "
                      "server or database (--mlflow-tracking-uri) instead of a file store")
    what.add_argument("--mlflow-tracking-uri", metavar="URI", help="with --mlflow-run: e.g. "
                      "sqlite:///mlflow.db or http://host:5000 (default: $MLFLOW_TRACKING_URI)")
    keep = parser.add_argument_group("best checkpoint")
    keep.add_argument("--checkpoint-dir", metavar="DIR",
                      help="where the framework saves checkpoints; best/ goes here")
    keep.add_argument("--checkpoints", metavar="PATTERN", help="checkpoint name under --checkpoint-dir with "
                      "{step} (default: the preset's, e.g. global_step_{step})")
    rule = parser.add_argument_group("decision")
    rule.add_argument("--detector", metavar="SPEC", default=DEFAULT_SPEC,
                      help=f"stopping rule (default: {DEFAULT_SPEC})")
    rule.add_argument("--shadow", action="store_true", help="report decisions, never stop")
    rule.add_argument("--verdicts", metavar="CSV", help="write the verdict as 'evalstop replay' does")
    rule.add_argument("--job-id", default="run", help="the job_id column of --verdicts (default: run)")
    act = parser.add_argument_group("target (one of)")
    act.add_argument("--pid", type=int, help="attach to a running process")
    act.add_argument("--ray-job", metavar="ID", help="a Ray job submission id (stopped via the Jobs API)")
    act.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS", DEFAULT_RAY_ADDRESS),
                     help=f"Ray dashboard URL (default: $RAY_ADDRESS or {DEFAULT_RAY_ADDRESS})")
    act.add_argument("--slurm-job", metavar="ID", help="a Slurm job id (stopped with scancel)")
    act.add_argument("command", nargs=argparse.REMAINDER, help="-- the training command to run")
    timing = parser.add_argument_group("timing")
    timing.add_argument("--grace", type=float, default=30.0,
                        help="seconds between SIGTERM and SIGKILL (default 30)")
    timing.add_argument("--poll", type=float, default=1.0, help="seconds between log reads (default 1)")
    timing.add_argument("--log-timeout", type=float, default=120.0,
                        help="seconds before saying a log, metric or checkpoint is missing (default 120)")
    parser.set_defaults(run=run)


class BadOption(ValueError):
    """One line naming the option and the bad value."""


def run(args: argparse.Namespace) -> int:
    try:
        options, make_target = build(args)
    except BadOption as exc:
        print(f"evalstop watch: error: {exc}", file=sys.stderr)
        return 2
    from .sidecar import Sidecar

    try:
        target = make_target()
    except (OSError, ValueError) as exc:
        print(f"evalstop watch: error: cannot start or reach the target: {exc}", file=sys.stderr)
        return 2
    sidecar = Sidecar(options, target)
    previous = {s: signal.signal(s, _forwarder(target)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = sidecar.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if args.verdicts:
            _write_verdicts(Path(args.verdicts), sidecar.result())
    return status


def _forwarder(target: Any) -> Any:
    def forward(signum: int, frame: FrameType | None) -> None:
        target.forward(signum)
    return forward


def _write_verdicts(path: Path, result: dict[str, Any]) -> None:
    from evalstop.replay import write_results

    with path.open("w", newline="", encoding="utf-8") as out:
        write_results([result], out)


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    """The sidecar's options and a factory for its target; BadOption for a bad combination."""
    from evalstop.detectors import parse_spec
    from evalstop.integrations._common import resolve_detector

    from .sidecar import Options

    preset: Preset | None = PRESETS.get(args.framework) if args.framework else None
    command = list(args.command[1:] if args.command[:1] == ["--"] else args.command)
    targets = [t for t in (command and "command", args.pid and "--pid", args.ray_job and "--ray-job",
                           args.slurm_job and "--slurm-job") if t]
    if len(targets) != 1:
        raise BadOption(f"give exactly one target: -- COMMAND, --pid, --ray-job or --slurm-job (got "
                        f"{', '.join(targets) or 'none'})")
    metric = args.metric or (preset.metric if preset else None)
    if not metric:
        raise BadOption(f"--metric is required without --framework (one of {', '.join(sorted(PRESETS))})")
    for name in ("grace", "poll", "log_timeout"):
        value = getattr(args, name)
        if not value > 0:
            raise BadOption(f"--{name.replace('_', '-')} must be a number > 0. Got {value!r} instead.")
    log = args.log or (preset.log if preset else "tensorboard")
    mlflow_run = None
    if args.mlflow_run or args.mlflow_tracking_uri:
        uri = args.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if log != "mlflow" or not args.mlflow_run or not uri:
            raise BadOption("an MLflow run is read with --log mlflow --mlflow-run RUN_ID "
                            "--mlflow-tracking-uri URI (or $MLFLOW_TRACKING_URI). Got "
                            f"--log {log}, --mlflow-run {args.mlflow_run!r}, tracking URI {uri!r}.")
        mlflow_run = (uri, args.mlflow_run)
    logdir = args.logdir or default_logdir(preset, args.checkpoint_dir, log) or ("." if mlflow_run else None)
    if logdir is None:
        hint = (" (the run's directory, or the wandb/ directory of a fresh WANDB_DIR)" if log == "wandb"
                else f" ({preset.name} writes it to {preset.log_hint})" if preset else "")
        raise BadOption(f"--logdir is required{hint}")
    try:
        mode = args.mode or (preset.mode if preset and not args.metric else None)
        detector = resolve_detector(parse_spec(args.detector), mode, "evalstop watch")
    except ValueError as exc:
        raise BadOption(f"--detector {args.detector!r}: {exc}") from None
    pattern = args.checkpoints or (preset.checkpoints if preset else None)
    if args.checkpoint_dir and not pattern:
        raise BadOption("--checkpoints PATTERN (with {step}) is required with --checkpoint-dir "
                        "without --framework")
    if pattern is not None and pattern.count("{step}") != 1:
        raise BadOption(f"--checkpoints must contain '{{step}}' once, e.g. global_step_{{step}}. "
                        f"Got {pattern!r} instead.")
    ready = preset.ready() if preset else Settled(max(5.0, 2 * args.poll))
    values_key = args.values_key or (preset.values_key if preset and log == "jsonl" else None)
    options = Options(metric=metric, detector=detector, log=log, logdir=Path(logdir).absolute(),
                      checkpoint_dir=Path(args.checkpoint_dir).absolute() if args.checkpoint_dir else None,
                      checkpoints=pattern, ready=ready,
                      step_key=args.step_key or default_step_key(preset, log), values_key=values_key,
                      poll_s=args.poll, grace_s=args.grace, log_timeout_s=args.log_timeout,
                      shadow=args.shadow, job_id=args.job_id, mlflow_run=mlflow_run)
    return options, lambda: _target(args, command)


def _target(args: argparse.Namespace, command: list[str]) -> Any:
    from .targets import Attached, Child, EngineJob

    if command:
        return Child(command)
    if args.pid:
        return Attached(args.pid)
    if args.ray_job:
        return EngineJob("ray", args.ray_job, {"address": args.ray_address})
    settings = json.loads(os.environ.get("EVALSTOP_ADAPTER_SETTINGS", "{}")).get("slurm", {})
    return EngineJob("slurm", args.slurm_job, settings)
