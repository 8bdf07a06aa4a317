"""A contract every enforcement adapter must pass, given a job that is really running.

Use from a test: start a job on the target system, build its :class:`JobRef`, then call
:func:`check_stop_sequence`; :func:`check_unknown_job` checks that a job the system no longer
knows counts as stopped. Both drive the adapter the way the service worker does.
"""

from __future__ import annotations

import time

from evalstop.service.adapters._base import EnforcementAdapter, JobRef


def wait_stopped(adapter: EnforcementAdapter, job: JobRef, *, timeout_s: float, poll_s: float = 0.2) -> bool:
    """Poll ``is_stopped`` until True or ``timeout_s`` passes; returns the last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        if adapter.is_stopped(job):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def check_stop_sequence(
    adapter: EnforcementAdapter, job: JobRef, checkpoint_uri: str | None, *,
    grace_s: float = 0.0, timeout_s: float = 30.0,
) -> None:
    """pin (twice) -> signal (twice) -> grace -> hard stop (twice) -> reconcile -> repeat all."""
    if adapter.is_stopped(job):
        raise AssertionError(f"{adapter.name}: job {job.external_ref} reported stopped before any stop")
    adapter.pin_checkpoint(job, checkpoint_uri)
    adapter.pin_checkpoint(job, checkpoint_uri)
    adapter.signal(job)
    adapter.signal(job)
    time.sleep(grace_s)
    adapter.hard_stop(job)
    adapter.hard_stop(job)
    if not wait_stopped(adapter, job, timeout_s=timeout_s):
        raise AssertionError(f"{adapter.name}: job {job.external_ref} not stopped after {timeout_s} s")
    # A replay after a crash: every step again, all success.
    adapter.pin_checkpoint(job, checkpoint_uri)
    adapter.signal(job)
    adapter.hard_stop(job)
    if not adapter.is_stopped(job):
        raise AssertionError(f"{adapter.name}: job {job.external_ref} no longer stopped after a replay")


def check_unknown_job(adapter: EnforcementAdapter, job: JobRef) -> None:
    """A job the target system does not know: stop verbs succeed, and it counts as stopped."""
    adapter.signal(job)
    adapter.hard_stop(job)
    if not adapter.is_stopped(job):
        raise AssertionError(f"{adapter.name}: unknown job {job.external_ref} not reported stopped")
