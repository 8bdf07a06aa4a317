"""Line-delimited JSON metric logs, read incrementally by byte offset.

One JSON object a line. The step is ``line[step_key]``; the metrics are the line's own keys, or
the keys of the object under ``values_key`` (veRL's ``file`` logger writes
``{"step": N, "data": {...}}``). A line still being written (no newline yet) waits for the next
read; a line that is not a JSON object is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, TypeGuard

from ._record import PathReader, ScoreRecord, read_from, whole_lines

log = logging.getLogger("evalstop.logs.jsonl")


class JsonlReader(PathReader):
    def __init__(self, path: str | Path, metric: str, *, step_key: str = "step",
                 values_key: str | None = None) -> None:
        super().__init__(path, metric)
        self.step_key, self.values_key = step_key, values_key
        self._offset = 0

    def exists(self) -> bool:
        return self.path.is_file()

    def read(self) -> list[ScoreRecord]:
        complete = whole_lines(read_from(self.path, self._offset))
        self._offset += len(complete)
        out = []
        for line in complete.splitlines():
            record = self._record(line)
            if record is not None:
                out.append(record)
        return out

    def _record(self, line: bytes) -> ScoreRecord | None:
        if not line.strip():
            return None
        try:
            row = json.loads(line)
        except ValueError:
            log.warning("%s: a line that is not JSON was skipped: %.80r", self.path, line)
            return None
        values: Any = row.get(self.values_key) if isinstance(row, dict) and self.values_key else row
        if not isinstance(values, dict) or not isinstance(row, dict):
            return None
        own = values is not row  # the step field is not a metric
        self._names.update(k for k, v in values.items() if _is_number(v) and (own or k != self.step_key))
        value, step = values.get(self.metric), row.get(self.step_key)
        if not _is_number(value) or not isinstance(step, int) or isinstance(step, bool):
            return None
        ts = row.get("timestamp", row.get("_timestamp"))
        return ScoreRecord(step, float(value), self.metric, None, float(ts) if _is_number(ts) else None)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
