"""What the sidecar stops: a child it started, a process it attached to, or an engine's job.

``poll()`` is None while the target runs, then its exit status (None is never returned again).
``stop(grace_s)`` asks it to stop and makes sure it has after ``grace_s``: a process group gets
SIGTERM, then SIGKILL for whatever is left; an engine job gets the adapter's signal, then its hard
stop. Engine adapters (``evalstop.service.adapters``) are imported only when used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

#: The engines ``--ray-job`` / ``--slurm-job`` name (keys of the service's adapter registry).
ENGINES = ("ray", "slurm")


class Target(ABC):
    description: str = ""

    @abstractmethod
    def poll(self) -> int | None:
        """None while running, else the exit status (128 + N for a death by signal N)."""

    @abstractmethod
    def stop(self, grace_s: float) -> str:
        """Stop it (gracefully, then for good after ``grace_s``); say what was done."""

    def forward(self, signum: int) -> None:  # noqa: B027 - optional
        """Pass a signal the sidecar received on to the target (a child only)."""

    def pin(self, checkpoint: str) -> None:  # noqa: B027 - optional
        """Tell the engine which checkpoint to keep (engines only)."""


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is left in group ``pgid``: a zombie awaits its parent's
    wait and holds nothing."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:  # no /proc: ask the kernel (zombies count as alive there)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state, _, pgrp = fh.read().rsplit(")", 1)[1].split()[:3]
        except OSError:
            continue
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


def _end_group(pgid: int, leader_gone: Any, grace_s: float) -> str:
    """SIGTERM to the group, wait for the leader up to ``grace_s``, SIGKILL what is left."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return f"process group {pgid} had already ended"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not leader_gone():
        time.sleep(0.05)
    if leader_gone() and not _group_alive(pgid):
        return f"SIGTERM to process group {pgid}; it ended"
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return f"SIGTERM to process group {pgid}; it ended"
    return f"SIGTERM to process group {pgid}; SIGKILL after {grace_s:g} s"


class Child(Target):
    """``argv`` run in a new session, so it leads its own process group."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(list(argv), start_new_session=True)
        self.description = f"pid {self.proc.pid}"

    def poll(self) -> int | None:
        code = self.proc.poll()
        return None if code is None else _status(code)

    def stop(self, grace_s: float) -> str:
        done = _end_group(self.proc.pid, lambda: self.proc.poll() is not None, grace_s)
        self.proc.wait()
        return done

    def forward(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)


class Attached(Target):
    """A running process: its process group is signalled when it leads one of its own, else the
    process alone (it shares the sidecar's group). Its exit status is not ours to read: 0."""

    def __init__(self, pid: int) -> None:
        os.kill(pid, 0)  # ProcessLookupError / PermissionError for the CLI to report
        self.pid = pid
        self.description = f"pid {pid}"

    def _gone(self) -> bool:
        try:
            with open(f"/proc/{self.pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except OSError:
            return True

    def poll(self) -> int | None:
        return 0 if self._gone() else None

    def stop(self, grace_s: float) -> str:
        try:
            pgid = os.getpgid(self.pid)
        except ProcessLookupError:
            return f"pid {self.pid} had already ended"
        if pgid == os.getpgid(0):
            os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and not self._gone():
                time.sleep(0.05)
            if self._gone():
                return f"SIGTERM to pid {self.pid}; it ended"
            os.kill(self.pid, signal.SIGKILL)
            return f"SIGTERM to pid {self.pid}; SIGKILL after {grace_s:g} s"
        return _end_group(pgid, self._gone, grace_s)


class EngineJob(Target):
    """A Ray job (submission id) or Slurm job id, stopped through the service's adapter for that
    engine (``settings`` as ``EVALSTOP_ADAPTER_SETTINGS`` would give them)."""

    def __init__(self, engine: str, ref: str, settings: dict[str, Any], check_every_s: float = 5.0) -> None:
        from evalstop.service.adapters import JobRef, get_adapter

        self.adapter = get_adapter(engine, settings)
        self.job = JobRef(job_id=ref, tenant="local", external_ref=ref)
        self.description = f"{engine} job {ref}"
        self.check_every_s = check_every_s
        self._next_check = 0.0

    def poll(self) -> int | None:
        if time.monotonic() < self._next_check:
            return None
        self._next_check = time.monotonic() + self.check_every_s
        return 0 if self.adapter.is_stopped(self.job) else None

    def stop(self, grace_s: float) -> str:
        self.adapter.signal(self.job)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if self.adapter.is_stopped(self.job):
                return "stop signal sent; it ended"
            time.sleep(min(1.0, grace_s))
        self.adapter.hard_stop(self.job)
        return f"stop signal sent; hard stop after {grace_s:g} s"

    def pin(self, checkpoint: str) -> None:
        self.adapter.pin_checkpoint(self.job, checkpoint)
