"""What each framework writes: the eval metric, its log, the checkpoint layout and when a
checkpoint is complete. Every value is read from the framework's own source; the file and line
of each are in docs/integrations.md ("Where the presets come from").
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .keeper import Ready


def has_file(name: str) -> Ready:
    """Complete once ``name`` exists inside the step's directory (written last by the framework)."""
    return lambda root, step_dir, step: (step_dir / name).is_file()


def tracker(relpath: str) -> Ready:
    """Complete once the tracker file ``relpath`` (under the checkpoint directory) names a step
    >= this one (the framework rewrites it after each complete save)."""
    def ready(root: Path, step_dir: Path, step: int) -> bool:
        try:
            numbers = re.findall(r"\d+", (root / relpath).read_text())
        except OSError:
            return False
        return bool(numbers) and int(numbers[-1]) >= step
    return ready


def exists(root: Path, step_dir: Path, step: int) -> bool:
    """Complete as soon as it exists (the framework renames a finished temporary directory)."""
    return step_dir.is_dir()


class Settled:
    """Complete once the directory's files (count, sizes, newest mtime) have not changed for
    ``settle_s`` seconds: for layouts that have no marker of their own."""

    def __init__(self, settle_s: float = 5.0, clock: Callable[[], float] | None = None) -> None:
        import time

        self.settle_s, self.clock = settle_s, clock or time.monotonic
        self._seen: dict[Path, tuple[tuple[int, int, int], float]] = {}

    def __call__(self, root: Path, step_dir: Path, step: int) -> bool:
        sizes = [(p.stat().st_size, p.stat().st_mtime_ns) for p in step_dir.rglob("*") if p.is_file()]
        stamp = (len(sizes), sum(s for s, _ in sizes), max((m for _, m in sizes), default=0))
        now = self.clock()
        previous = self._seen.get(step_dir)
        if previous is None or previous[0] != stamp:
            self._seen[step_dir] = (stamp, now)
            return False
        return now - previous[1] >= self.settle_s


#: the HF Trainer's ``WandbCallback`` logs each row with this key (not ``step=``)
TRAINER_WANDB_STEP = "train/global_step"


@dataclass(frozen=True)
class Preset:
    """``metric`` may be a glob (``val-core/*/acc/mean@*``): the run's one matching tag is used.
    ``log``: the reader (``tensorboard``, ``jsonl``, ``mlflow``, ``trainer_state``);
    ``log_hint``: where the framework writes it by default (for messages and docs)."""

    name: str
    metric: str
    mode: str
    log: str
    log_hint: str
    checkpoints: str
    ready: Callable[[], Ready]
    checkpoint_hint: str
    wandb_step_key: str = "_step"
    values_key: str | None = None


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("verl", "val-core/*/*/mean@*", "max", "tensorboard",
           "$TENSORBOARD_DIR, else tensorboard_log/<project_name>/<experiment_name>",
           "global_step_{step}", lambda: tracker("latest_checkpointed_iteration.txt"),
           "trainer.default_local_dir (checkpoints/<project_name>/<experiment_name>)", values_key="data"),
    Preset("openrlhf", "eval/eval_*_pass1", "max", "tensorboard",
           "<logger.tensorboard_dir>/<logger.wandb.run_name>",
           "_actor/global_step{step}", lambda: tracker("_actor/latest"), "ckpt.path"),
    Preset("nemo-rl", "validation/accuracy", "max", "tensorboard",
           "<logger.log_dir>/exp_<N>/tensorboard", "step_{step}", lambda: exists,
           "checkpointing.checkpoint_dir"),
    Preset("trl", "eval/reward", "max", "tensorboard", "<output_dir>/runs/<date>_<host>",
           "checkpoint-{step}", lambda: has_file("trainer_state.json"), "output_dir",
           wandb_step_key=TRAINER_WANDB_STEP),
    Preset("hf", "eval/loss", "min", "tensorboard", "<output_dir>/runs/<date>_<host>",
           "checkpoint-{step}", lambda: has_file("trainer_state.json"), "output_dir",
           wandb_step_key=TRAINER_WANDB_STEP),
)}

#: readers the --log option names; the JSON-lines layout of veRL's ``file`` logger is the default.
LOGS = ("tensorboard", "jsonl", "mlflow", "trainer_state", "wandb")
#: the step field of each log that has one by name (a preset may name another for wandb)
STEP_KEYS = {"jsonl": "step", "wandb": "_step"}


def default_step_key(preset: Preset | None, log: str) -> str:
    if log == "wandb" and preset is not None:
        return preset.wandb_step_key
    return STEP_KEYS.get(log, "step")


def default_logdir(preset: Preset | None, checkpoint_dir: str | None, log: str) -> str | None:
    """The HF Trainer writes its TensorBoard log under ``output_dir``: with ``--checkpoint-dir``
    given, that is where to look. Other frameworks' logs live elsewhere (no default)."""
    if log == "wandb":
        return None
    if preset is not None and preset.name in ("trl", "hf") and checkpoint_dir is not None:
        return os.fspath(checkpoint_dir)
    return None
