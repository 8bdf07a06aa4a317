"""TensorBoard event files, read incrementally by byte offset without the tensorboard package."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ._record import PathReader, ScoreRecord, read_from
from ._tfrecord import event_scalars, split_records

log = logging.getLogger("evalstop.logs.tensorboard")
EVENT_FILE_MARK = "tfevents"


class TensorBoardReader(PathReader):
    """Scalar ``tag`` from the event files in ``logdir`` (and its subdirectories when
    ``recursive``: the HF Trainer writes to ``output_dir/runs/<date>_<host>/``).

    Each file is read from where the previous read stopped; a file that appears later (a
    resumed job opens a new one) is read from its start. Files are read in name order, which
    for TensorBoard's ``events.out.tfevents.<unix time>.<host>...`` names is creation order.
    """

    def __init__(self, logdir: str | Path, tag: str, *, recursive: bool = False) -> None:
        super().__init__(logdir, tag)
        self.logdir, self.recursive = self.path, recursive
        self._offsets: dict[Path, int] = {}

    def exists(self) -> bool:
        return self.logdir.is_dir()

    def files(self) -> list[Path]:
        """The event files under ``logdir`` now, in reading order."""
        if not self.recursive:
            try:
                return sorted(p for p in self.logdir.iterdir() if EVENT_FILE_MARK in p.name and p.is_file())
            except OSError:
                return []
        found: list[Path] = []
        for root, _, names in os.walk(self.logdir):
            found.extend(Path(root, n) for n in names if EVENT_FILE_MARK in n)
        return sorted(found, key=lambda p: (p.name, str(p)))

    def read(self) -> list[ScoreRecord]:
        out: list[ScoreRecord] = []
        for path in self.files():
            out.extend(self._read_file(path))
        return out

    def _read_file(self, path: Path) -> list[ScoreRecord]:
        offset = self._offsets.get(path, 0)
        buf = read_from(path, offset)
        records, used = split_records(buf)
        self._offsets[path] = offset + used
        out = []
        for data in records:
            try:
                scalars = list(event_scalars(data))
            except (ValueError, IndexError, UnicodeDecodeError) as exc:
                log.warning("%s: an event that does not parse was skipped: %s", path, exc)
                continue
            for tag, step, value, wall_time in scalars:
                self._names.add(tag)
                if tag == self.metric:
                    out.append(ScoreRecord(step, value, tag, None, wall_time))
        return out
