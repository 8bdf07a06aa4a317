"""Keep the best eval's checkpoint out of reach of the framework's own rotation.

The framework saves checkpoints as directories named by a pattern (``checkpoint-{step}``,
``global_step_{step}``, ``_actor/global_step{step}``, ``step_{step}``) under a checkpoint
directory and deletes old ones. When the rule names a new best eval, the keeper waits until that
step's checkpoint is complete (the preset's readiness rule), then builds a copy of it made of hard
links (a file copy where links cannot be made: another file system, or a file system without
links) in a hidden directory beside the checkpoints, writes ``EVALSTOP.json`` into it, and points
the symlink ``best`` at it with one ``rename``: ``best/`` always holds one complete checkpoint,
the previous one until the new one is whole. Rotation unlinks the framework's names; the links
in ``best/`` keep the data. Old copies are removed after the switch. The keeper never writes
into or deletes the framework's own checkpoints.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BEST_LINK = "best"
COPY_PREFIX = ".evalstop-best-"
RECORD = "EVALSTOP.json"
#: ``ready(checkpoint_dir, step_dir, step)``: whether the checkpoint of ``step`` is complete.
Ready = Callable[[Path, Path, int], bool]


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """``global_step_{step}`` -> a regex whose group 1 is the step."""
    if pattern.count("{step}") != 1:
        raise ValueError(f"The checkpoint pattern must contain '{{step}}' once. Got {pattern!r} instead.")
    head, tail = pattern.split("{step}")
    return re.compile(re.escape(head) + r"(\d+)" + re.escape(tail) + r"\Z")


@dataclass
class Kept:
    step: int
    value: float
    path: Path


class BestKeeper:
    """``offer(step, value)`` at each new best eval; ``tick()`` each poll. ``on_event(line)``
    receives one line per copy made or abandoned."""

    def __init__(self, checkpoint_dir: str | Path, pattern: str, ready: Ready, *, metric: str,
                 on_event: Callable[[str], None] = lambda line: None) -> None:
        self.dir, self.pattern, self.ready = Path(checkpoint_dir), pattern, ready
        self.metric, self.on_event = metric, on_event
        self._regex = pattern_regex(pattern)
        self.pending: tuple[int, float] | None = None
        self.kept: Kept | None = None
        self.matched_any = False

    def step_dir(self, step: int) -> Path:
        return self.dir / self.pattern.format(step=step)

    def saved_steps(self) -> list[int]:
        """Steps whose checkpoint directory exists now."""
        steps = []
        for entry in self.dir.glob(self.pattern.replace("{step}", "*")):
            m = self._regex.match(entry.relative_to(self.dir).as_posix())
            if m and entry.is_dir():
                steps.append(int(m.group(1)))
        if steps:
            self.matched_any = True
        return sorted(steps)

    def offer(self, step: int, value: float) -> None:
        """A new best eval at ``step``: keep its checkpoint once it is complete."""
        self.pending = (step, value)
        self.tick()

    def tick(self) -> None:
        """Copy the pending best once its checkpoint is ready; give it up once a later step's
        checkpoint is complete while it has none (the framework did not save at that step)."""
        if self.pending is None:
            return
        step, value = self.pending
        path = self.step_dir(step)
        self.matched_any = self.matched_any or path.is_dir()
        if path.is_dir() and self.ready(self.dir, path, step):
            self.pending = None
            self._keep(step, value, path)
            return
        later = [s for s in self.saved_steps() if s > step]
        if later and self.ready(self.dir, self.step_dir(later[0]), later[0]):
            self.pending = None
            kept = f"; best/ keeps step {self.kept.step}" if self.kept else ""
            self.on_event(f"best eval at step {step} has no checkpoint ({self.pattern.format(step=step)} "
                          f"was not saved){kept}")

    def _keep(self, step: int, value: float, path: Path) -> None:
        try:
            self._link(step, value, path)
        except OSError as exc:  # a full disk, a foreign best/: say so, keep watching
            self.on_event(f"cannot keep step {step}'s checkpoint {path} in {self.dir / BEST_LINK}: {exc}")

    def _link(self, step: int, value: float, path: Path) -> None:
        name = f"{COPY_PREFIX}{step}"
        tmp = self.dir / f"{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            linked, copied = link_tree(path, tmp)
        except FileNotFoundError:  # rotated away while we linked: too late for this one
            shutil.rmtree(tmp, ignore_errors=True)
            self.on_event(f"checkpoint {path} was deleted while being kept; best/ unchanged")
            return
        record = {"step": step, "metric": self.metric, "value": value, "source": str(path),
                  "kept_at": time.time(), "files_linked": linked, "files_copied": copied}
        (tmp / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        final = self.dir / name
        shutil.rmtree(final, ignore_errors=True)
        os.rename(tmp, final)
        _point(self.dir / BEST_LINK, name)
        previous, self.kept = self.kept, Kept(step, value, final)
        if previous is not None and previous.path != final:
            shutil.rmtree(previous.path, ignore_errors=True)
        how = "linked" if not copied else f"{linked} files linked, {copied} copied"
        self.on_event(f"best/ now holds step {step} ({self.metric}={value:.6g}, {how}) from {path}")

    def record(self) -> dict[str, Any] | None:
        """``best/EVALSTOP.json``, if a checkpoint is kept."""
        try:
            data: dict[str, Any] = json.loads((self.dir / BEST_LINK / RECORD).read_text())
        except (OSError, ValueError):
            return None
        return data


def link_tree(src: Path, dst: Path) -> tuple[int, int]:
    """``dst`` as a copy of ``src`` made of hard links (a copy per file that cannot be linked);
    returns (files linked, files copied)."""
    linked = copied = 0
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            s, d = Path(root, name), dst / rel / name
            if s.is_symlink():
                os.symlink(os.readlink(s), d)
                continue
            try:
                os.link(s, d)
                linked += 1
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
                shutil.copy2(s, d)
                copied += 1
        dirs.sort()
    return linked, copied


def _point(link: Path, target: str) -> None:
    """Make ``link`` a symlink to ``target`` in one rename (atomic on POSIX)."""
    tmp = link.with_name(f"{link.name}.tmp-{os.getpid()}")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    if link.exists() and not link.is_symlink():
        raise FileExistsError(f"{link} exists and is not evalstop's best/ link; remove or rename it")
    os.replace(tmp, link)
