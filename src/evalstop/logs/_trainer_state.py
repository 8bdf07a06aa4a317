"""Hugging Face ``trainer_state.json``: the Trainer's ``log_history`` holds every eval.

The Trainer rewrites the file (not atomically) at each save, inside ``output_dir/checkpoint-N/``
and at the end in ``output_dir``; checkpoints rotate away under ``save_total_limit``. So the
path may be the file itself or its ``output_dir``: every ``trainer_state.json`` found there is
read, a half-written one is skipped until the next read, unchanged files are not re-parsed. The
file is rewritten whole, so "new" means an entry (step, value) not returned before: a step
re-evaluated with another value after a resume comes back as a new record.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from ._record import PathReader, ScoreRecord

log = logging.getLogger("evalstop.logs.trainer_state")
STATE_FILE = "trainer_state.json"


class TrainerStateReader(PathReader):
    """``metric`` as the Trainer logs it (``eval_loss``, ``eval_accuracy``; a bare ``accuracy``
    also matches ``eval_accuracy``). An eval at step N gets ``output_dir/checkpoint-N`` as its
    checkpoint when that directory exists."""

    def __init__(self, path: str | Path, metric: str) -> None:
        super().__init__(path, metric)
        self._keys = (metric,) if metric.startswith("eval_") else (metric, f"eval_{metric}")
        self._stamps: dict[Path, tuple[int, int]] = {}
        self._seen: set[tuple[int, float | str]] = set()

    def read(self) -> list[ScoreRecord]:
        output_dir = self.path.parent if self.path.is_file() or self.path.name == STATE_FILE else self.path
        out: list[ScoreRecord] = []
        for state_file in self._state_files():
            for entry in self._changed_history(state_file):
                record = self._record(entry, output_dir)
                if record is not None:
                    out.append(record)
        return out

    def _state_files(self) -> list[Path]:
        if self.path.name == STATE_FILE:
            return [self.path] if self.path.exists() else []
        found = [self.path / STATE_FILE] if (self.path / STATE_FILE).exists() else []
        return found + sorted(self.path.glob(f"checkpoint-*/{STATE_FILE}"))

    def _record(self, entry: dict[str, Any], output_dir: Path) -> ScoreRecord | None:
        self._names.update(k for k, v in entry.items() if isinstance(v, (int, float)))
        key = next((k for k in self._keys if k in entry), None)
        step = entry.get("step")
        if key is None or not isinstance(step, int) or not isinstance(entry[key], (int, float)):
            return None
        value = float(entry[key])
        seen = (step, "nan" if math.isnan(value) else value)
        if seen in self._seen:
            return None
        self._seen.add(seen)
        ckpt = output_dir / f"checkpoint-{step}"
        return ScoreRecord(step, value, self.metric, str(ckpt) if ckpt.is_dir() else None)

    def _changed_history(self, state_file: Path) -> list[dict[str, Any]]:
        """The log history of ``state_file`` if it changed since the last read, else []."""
        try:
            st = state_file.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if self._stamps.get(state_file) == stamp:
                return []
            history = json.loads(state_file.read_text()).get("log_history", [])
        except (OSError, ValueError, AttributeError) as exc:  # rotated away or half-written
            log.debug("%s unreadable this read: %s", state_file, exc)
            return []
        self._stamps[state_file] = stamp
        return [e for e in history if isinstance(e, dict)] if isinstance(history, list) else []
