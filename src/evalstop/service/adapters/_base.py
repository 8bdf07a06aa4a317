"""The enforcement contract shared by the service worker and every adapter.

The worker calls, in this order and possibly more than once (every call is idempotent):
``pin_checkpoint`` -> ``signal`` -> (after the job's grace period, if still running)
``hard_stop`` -> ``is_stopped`` (reconcile). "Already stopped" / "already pinned" is success.
A transient failure raises :class:`AdapterError` with ``retryable=True``; the worker retries
with backoff. The service never deletes user checkpoints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JobRef:
    """Where a job runs: ``external_ref`` is its id on that system (Ray submission id, Slurm
    job id, Kubernetes ``namespace/name``, webhook key); ``options`` are adapter settings from
    the job's registration (e.g. ``{"kind": "JobSet"}``)."""

    job_id: str
    tenant: str
    external_ref: str
    options: Mapping[str, Any] = field(default_factory=dict)


class AdapterError(RuntimeError):
    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class EnforcementAdapter(ABC):
    name: str = ""

    @abstractmethod
    def pin_checkpoint(self, job: JobRef, checkpoint_uri: str | None) -> None:
        """Make sure ``checkpoint_uri`` survives the stop (tag, label, copy-protect)."""

    @abstractmethod
    def signal(self, job: JobRef) -> None:
        """Ask the job to stop gracefully (SIGTERM-like)."""

    @abstractmethod
    def hard_stop(self, job: JobRef) -> None:
        """Stop it for good (SIGKILL / delete)."""

    @abstractmethod
    def is_stopped(self, job: JobRef) -> bool:
        """Reconcile: True once the job no longer holds its resources."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release what the adapter holds (HTTP connection pools); call at shutdown."""
