"""An adapter plugin for the browser tests: a stop target whose receiver is down while a marker
file exists (each call then fails, not retryable), and which otherwise behaves like the dry-run
target. Loaded by the ``evalstop serve`` subprocess through ``EVALSTOP_ADAPTER_PLUGINS``."""

from __future__ import annotations

import threading
from pathlib import Path

from evalstop.service.adapters._base import AdapterError, EnforcementAdapter, JobRef


class ReceiverDown(EnforcementAdapter):
    name = "receiver-down"

    def __init__(self, down_file: str) -> None:
        self.down_file = Path(down_file)
        self._stopped: set[str] = set()
        self._lock = threading.Lock()

    def _check(self, call: str) -> None:
        if self.down_file.exists():
            raise AdapterError(f"{call}: receiver unreachable (connection refused)", retryable=False)

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        self._check("pin")

    def signal(self, job: JobRef) -> None:
        self._check("signal")
        with self._lock:
            self._stopped.add(job.external_ref)

    def hard_stop(self, job: JobRef) -> None:
        self.signal(job)

    def is_stopped(self, job: JobRef) -> bool:
        with self._lock:
            return job.external_ref in self._stopped
