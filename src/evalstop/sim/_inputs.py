"""What the simulator does with a workload before and after a run: the up-front checks, the
arrival order, and the event log."""

from __future__ import annotations

import hashlib
import math
import sys
from array import array
from collections.abc import Iterator

from .._validation import InvalidParameterError
from ..workloads import JobSpec, JobTruth, Workload


def check_jobs(workload: Workload) -> None:
    """Reject, before the run, a job no allocation could ever start or time."""
    total = workload.config.total_gpus
    for spec, truth in zip(workload.jobs, workload.truth, strict=True):
        if not 1 <= spec.gpus <= total:
            raise InvalidParameterError(
                f"Job {spec.job_id} asks for {spec.gpus} GPUs; the cluster has {total} "
                f"(a job needs 1 to {total})."
            )
        if not (truth.duration_s >= 0.0 and math.isfinite(truth.duration_s)):
            raise InvalidParameterError(
                f"Job {spec.job_id} has duration_s={truth.duration_s!r}; it must be finite and >= 0."
            )


def in_arrival_order(workload: Workload) -> Iterator[tuple[JobSpec, JobTruth]]:
    """The workload's (spec, truth) pairs by arrival time; ties keep the workload's order."""
    pairs = list(zip(workload.jobs, workload.truth, strict=True))
    return iter(sorted(pairs, key=lambda pair: pair[0].arrival_s))


ARRIVED, STARTED, PREEMPTED, KILLED, COMPLETED = range(5)
EVENT_NAMES = ("arrive", "start", "preempt", "kill", "complete")


class EventLog:
    """The run's event log in three columns (17 bytes an event, not a tuple of objects).

    ``digest`` is the SHA-256 of: the number of events (8 bytes), every time as a little-endian
    float64, every event code (one byte, index in ``EVENT_NAMES``), every job id as a
    little-endian int64. Equal logs give equal digests on any platform."""

    __slots__ = ("ids", "kinds", "times")

    def __init__(self) -> None:
        self.times = array("d")
        self.kinds = bytearray()
        self.ids = array("q")

    def add(self, time: float, kind: int, job_id: int) -> None:
        self.times.append(time)
        self.kinds.append(kind)
        self.ids.append(job_id)

    def __len__(self) -> int:
        return len(self.kinds)

    def entries(self) -> list[tuple[float, str, int]]:
        names = [EVENT_NAMES[k] for k in self.kinds]
        return list(zip(self.times.tolist(), names, self.ids.tolist(), strict=True))

    def digest(self) -> str:
        times, ids = self.times, self.ids
        if sys.byteorder != "little":
            times, ids = array("d", times), array("q", ids)
            times.byteswap()
            ids.byteswap()
        sha = hashlib.sha256(len(self).to_bytes(8, "little"))
        for column in (times, self.kinds, ids):
            sha.update(memoryview(column).cast("B"))
        return sha.hexdigest()
