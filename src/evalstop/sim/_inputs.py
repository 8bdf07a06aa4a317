"""What the simulator does with a workload before and after a run: the up-front checks, the
arrival order, and the event log."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from itertools import chain
from math import inf
from typing import Any

import numpy as np

from .._validation import InvalidParameterError
from ..workloads.table import JobTable
from ._job import FLUSH, Job


def check_jobs(table: JobTable, total: int) -> None:
    """Reject, before the run, a job no allocation could ever start or time."""
    gpus, duration = table.gpus, table.duration_s
    bad = np.flatnonzero((gpus < 1) | (gpus > total))
    if bad.size:
        i = int(bad[0])
        raise InvalidParameterError(
            f"Job {table.job_id[i]} asks for {gpus[i]} GPUs; the cluster has {total} "
            f"(a job needs 1 to {total})."
        )
    for name, column in (("duration_s", duration), ("arrival_s", table.arrival_s)):
        bad = np.flatnonzero(~((column >= 0.0) & np.isfinite(column)))
        if bad.size:
            i = int(bad[0])
            raise InvalidParameterError(
                f"Job {table.job_id[i]} has {name}={column[i].item()!r}; it must be finite and >= 0."
            )
    ids = table.job_id
    if not np.all(ids[1:] > ids[:-1]) and np.unique(ids).size != len(table):  # ascending: unique
        ids, counts = np.unique(table.job_id, return_counts=True)
        raise InvalidParameterError(f"Job ids must be unique; job {ids[counts > 1][0]} appears twice.")


#: Rows converted to Python values per chunk of the arrival order (bounds the transient lists).
_CHUNK = 65536


def arrival_jobs(table: JobTable) -> Iterator[Job]:
    """A :class:`Job` for every row, by arrival time (ties keep the workload's order), each
    built as it is asked for (from Python values converted a chunk at a time), then a sentinel
    that arrives at infinity (so a caller needs no end-of-jobs check). The iterator is a C-level
    chain of maps: no Python frame resumes between two jobs."""
    order = np.argsort(table.arrival_s, kind="stable")
    kinds = table.kinds

    def chunks() -> Iterator[Iterator[Job]]:
        for first in range(0, order.size, _CHUNK):
            rows = order[first:first + _CHUNK]
            yield map(
                Job, rows.tolist(), table.job_id[rows].tolist(), table.tenant[rows].tolist(),
                [kinds[k] for k in table.kind[rows].tolist()], table.gpus[rows].tolist(),
                table.arrival_s[rows].tolist(), table.budget_s[rows].tolist(),
            )

    return chain(chain.from_iterable(chunks()), (Job(-1, -1, -1, "", 0, inf, 0.0),))


ARRIVED, STARTED, PREEMPTED, KILLED, COMPLETED = range(5)
EVENT_NAMES = ("arrive", "start", "preempt", "kill", "complete")


class EventLog:
    """The run's event log in three columns (17 bytes an event once flushed, not a tuple of
    objects).

    The hot loop appends to plain lists and a bytearray (``appenders``): a list append costs a
    fraction of an ``array`` append, which parses its argument. ``flush`` moves the listed times
    and ids into numpy chunks; the loop calls it when ``len(times)`` reaches ``FLUSH`` (``add``
    checks by itself), so the lists stay short.

    ``digest`` is the SHA-256 of: the number of events (8 bytes), every time as a little-endian
    float64, every event code (one byte, index in ``EVENT_NAMES``), every job id as a
    little-endian int64. Equal logs give equal digests on any platform."""

    __slots__ = ("_chunks", "ids", "kinds", "times")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.kinds = bytearray()
        self.ids: list[int] = []
        self._chunks: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []  # (times, ids)

    def add(self, time: float, kind: int, job_id: int) -> None:
        self.times.append(time)
        self.kinds.append(kind)
        self.ids.append(job_id)
        if len(self.times) >= FLUSH:
            self.flush()

    def appenders(self) -> tuple[Callable[[float], None], Callable[[int], None], Callable[[int], None]]:
        """The three columns' ``append`` methods: ``add`` for a caller's hot loop (which then
        calls ``flush`` when ``len(self.times)`` reaches ``FLUSH``)."""
        return self.times.append, self.kinds.append, self.ids.append

    def flush(self) -> None:
        if self.times:
            n = len(self.times)
            times = np.fromiter(self.times, dtype="<f8", count=n)
            self._chunks.append((times, np.fromiter(self.ids, dtype="<i8", count=n)))
            self.times.clear()
            self.ids.clear()

    def __len__(self) -> int:
        return len(self.kinds)

    def _columns(self) -> tuple[list[np.ndarray[Any, Any]], list[np.ndarray[Any, Any]]]:
        self.flush()
        return [c[0] for c in self._chunks], [c[1] for c in self._chunks]

    def entries(self) -> list[tuple[float, str, int]]:
        times, ids = self._columns()
        names = [EVENT_NAMES[k] for k in self.kinds]
        all_times = [t for chunk in times for t in chunk.tolist()]
        all_ids = [i for chunk in ids for i in chunk.tolist()]
        return list(zip(all_times, names, all_ids, strict=True))

    def digest(self) -> str:
        times, ids = self._columns()
        sha = hashlib.sha256(len(self).to_bytes(8, "little"))
        for chunk in times:
            sha.update(chunk.tobytes())
        sha.update(self.kinds)
        for chunk in ids:
            sha.update(chunk.tobytes())
        return sha.hexdigest()
