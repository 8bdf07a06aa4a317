"""Hugging Face ``trainer_state.json``: the Trainer's ``log_history`` holds every eval.

The Trainer rewrites the file (not atomically) at each save, inside ``output_dir/checkpoint-N/``
and at the end in ``output_dir``; checkpoints rotate away under ``save_total_limit``. So a job's
path may be the file itself or its ``output_dir``: every ``trainer_state.json`` found there is
read, a half-written one is skipped until the next poll, unchanged files are not re-parsed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalstop.service.pull._base import Cursor, Poller, ScoreRecord, Sink

log = logging.getLogger("evalstop.service.pull.trainer_state")
STATE_FILE = "trainer_state.json"


class TrainerStatePoller(Poller):
    """``metric`` as the Trainer logs it (``eval_loss``, ``eval_accuracy``; a bare ``accuracy``
    also matches ``eval_accuracy``). An eval at step N gets ``output_dir/checkpoint-N`` as its
    checkpoint when that directory exists."""

    kind = "trainer_state"

    def __init__(self, sink: Sink, *, paths: Mapping[str, str | Path], metric: str,
                 cursor: Cursor | None = None) -> None:
        super().__init__(sink, cursor)
        self.paths = {k: Path(v) for k, v in paths.items()}
        self.metric = metric
        self._keys = (metric,) if metric.startswith("eval_") else (metric, f"eval_{metric}")
        self._cache: dict[Path, tuple[tuple[int, int], list[dict[str, Any]]]] = {}

    def fetch(self) -> Mapping[str, Sequence[ScoreRecord]]:
        out: dict[str, list[ScoreRecord]] = {}
        for job_key, path in self.paths.items():
            output_dir = path.parent if path.is_file() or path.name == STATE_FILE else path
            records: list[ScoreRecord] = []
            for state_file in self._state_files(path):
                records.extend(self._records(state_file, output_dir))
            out[job_key] = records
        return out

    def _state_files(self, path: Path) -> list[Path]:
        if path.name == STATE_FILE:
            return [path] if path.exists() else []
        found = [path / STATE_FILE] if (path / STATE_FILE).exists() else []
        return found + sorted(path.glob(f"checkpoint-*/{STATE_FILE}"))

    def _records(self, state_file: Path, output_dir: Path) -> list[ScoreRecord]:
        entries = self._log_history(state_file)
        out = []
        for entry in entries:
            key = next((k for k in self._keys if k in entry), None)
            step = entry.get("step")
            if key is None or not isinstance(step, int) or not isinstance(entry[key], (int, float)):
                continue
            ckpt = output_dir / f"checkpoint-{step}"
            out.append(ScoreRecord(step, float(entry[key]), self.metric,
                                   str(ckpt) if ckpt.is_dir() else None))
        return out

    def _log_history(self, state_file: Path) -> list[dict[str, Any]]:
        try:
            st = state_file.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            cached = self._cache.get(state_file)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            history = json.loads(state_file.read_text()).get("log_history", [])
        except (OSError, ValueError, AttributeError) as exc:  # rotated away or half-written
            log.debug("%s unreadable this poll: %s", state_file, exc)
            return []
        entries = [e for e in history if isinstance(e, dict)] if isinstance(history, list) else []
        self._cache[state_file] = (stamp, entries)
        return entries
