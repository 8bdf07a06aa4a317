"""Dry-run: record what would be done, touch nothing. For shadow set-ups and tests."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalstop.service.adapters._base import EnforcementAdapter, JobRef

log = logging.getLogger("evalstop.service.adapters.dry_run")


@dataclass(frozen=True)
class Action:
    """One intended action: ``verb`` is ``pin``, ``signal`` or ``hard_stop``."""

    verb: str
    job_id: str
    external_ref: str
    checkpoint_uri: str | None = None


class DryRunAdapter(EnforcementAdapter):
    """Records each intended action once (repeats are idempotent no-ops) and logs it.

    ``is_stopped`` answers True once a signal or hard stop was recorded, so the worker's
    reconcile step completes as it would on a real system.
    """

    name = "dry-run"

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._actions: list[Action] = []

    @property
    def actions(self) -> list[Action]:
        with self._lock:
            return list(self._actions)

    def _record(self, action: Action) -> None:
        with self._lock:
            if action in self._actions:
                return
            self._actions.append(action)
        log.info("dry-run: would %s job %s (%s)", action.verb, action.job_id, action.external_ref)

    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        if checkpoint_uri is not None:
            self._record(Action("pin", job.job_id, job.external_ref, checkpoint_uri))

    def signal(self, job: JobRef) -> None:
        self._record(Action("signal", job.job_id, job.external_ref))

    def hard_stop(self, job: JobRef) -> None:
        self._record(Action("hard_stop", job.job_id, job.external_ref))

    def is_stopped(self, job: JobRef) -> bool:
        with self._lock:
            return any(a.job_id == job.job_id and a.verb != "pin" for a in self._actions)
