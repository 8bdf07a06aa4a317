"""A recording enforcement adapter: a faithful stand-in for a scheduler, for tests and demos.

It models each job (by ``external_ref``) as running until stopped, and records every call with
whether it had an *effect* ("already stopped" / "already pinned" calls are recorded as
no-effect successes, as the contract asks). With ``path``, calls are appended to a JSON-lines
file and the state is rebuilt from it, so a restarted server process sees the same jobs.

Job options (from the registration's ``target_options``): ``obeys_signal`` (default true: the
job exits on ``signal``; false: only ``hard_stop`` stops it).
Use ``fail_next(call, n, retryable=True)`` to make the next ``n`` calls of one kind fail.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from evalstop.service.adapters._base import AdapterError, EnforcementAdapter, JobRef


class RecordingAdapter(EnforcementAdapter):
    name = "recording"

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.calls: list[dict[str, Any]] = []
        self.stopped: set[str] = set()
        self.pinned: set[tuple[str, str | None]] = set()
        self._failures: dict[str, tuple[int, bool | None]] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            for line in self.path.read_text().splitlines():
                if line.strip():
                    self._apply(json.loads(line))

    def fail_next(self, call: str, n: int, *, retryable: bool | None = True) -> None:
        """Make the next ``n`` calls of ``call`` raise AdapterError(retryable), or, with
        ``retryable=None``, a plain RuntimeError (an adapter bug)."""
        self._failures[call] = (n, retryable)

    def effects(self, call: str, external_ref: str) -> int:
        """How many ``call``s changed something for this job (exactly-once means 1)."""
        return sum(1 for c in self.calls if c["call"] == call and c["ref"] == external_ref and c["effect"])

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        self._record("pin_checkpoint", job, (job.external_ref, checkpoint_uri) not in self.pinned,
                     checkpoint_uri=checkpoint_uri)

    def signal(self, job: JobRef) -> None:
        obeys = bool(job.options.get("obeys_signal", True))
        self._record("signal", job, job.external_ref not in self.stopped, stops=obeys)

    def hard_stop(self, job: JobRef) -> None:
        self._record("hard_stop", job, job.external_ref not in self.stopped, stops=True)

    def is_stopped(self, job: JobRef) -> bool:
        self._maybe_fail("is_stopped")
        return job.external_ref in self.stopped

    def _record(self, call: str, job: JobRef, effect: bool, *, stops: bool = False, **extra: Any) -> None:
        self._maybe_fail(call)
        entry = {"call": call, "ref": job.external_ref, "job_id": job.job_id, "effect": effect,
                 "stops": stops and effect, **extra}
        with self._lock:
            self._apply(entry)
            if self.path is not None:
                with self.path.open("a") as f:
                    f.write(json.dumps(entry) + "\n")
                    f.flush()
                    os.fsync(f.fileno())

    def _apply(self, entry: dict[str, Any]) -> None:
        self.calls.append(entry)
        if entry["stops"]:
            self.stopped.add(entry["ref"])
        if entry["call"] == "pin_checkpoint":
            self.pinned.add((entry["ref"], entry.get("checkpoint_uri")))

    def _maybe_fail(self, call: str) -> None:
        n, retryable = self._failures.get(call, (0, True))
        if n > 0:
            self._failures[call] = (n - 1, retryable)
            if retryable is None:
                raise RuntimeError(f"injected bug in {call}")
            raise AdapterError(f"injected failure of {call}", retryable=retryable)
