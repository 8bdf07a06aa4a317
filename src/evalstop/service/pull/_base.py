"""Pull ingest: read eval scores a job already writes somewhere, hand new ones to a sink.

A :class:`Poller` reads its source (``fetch``: job key -> every record it can see), drops what
its :class:`Cursor` says was already delivered, passes the rest to the ``Sink`` and only then
advances the cursor: delivery is at-least-once, and re-polling sends nothing twice. Non-finite
values are dropped and counted, never delivered (a NaN never stops a job).
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from evalstop.logs import LogReader, ScoreRecord

log = logging.getLogger("evalstop.service.pull")


Sink = Callable[[str, Sequence[ScoreRecord]], None]
"""Receives ``(job_key, new records in step order)``. Raising leaves them undelivered (retried on
the next poll): raise for transient failures only. A sink that refuses records for good (a
4xx-like domain error) should log and return, so they count as delivered and do not block
the job's later scores."""


class Cursor:
    """Per (job key, metric): the steps already delivered and their values.

    In memory, or persisted as JSON at ``path`` (atomic rewrite) so a restarted poller does
    not resend. A step seen again with a different value (a rewritten log) is not resent:
    the first delivered value stands, as in the service's idempotent ingest.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._sent: dict[str, dict[int, float]] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            raw = json.loads(self.path.read_text())
            self._sent = {k: {int(s): float(v) for s, v in steps.items()} for k, steps in raw.items()}

    @staticmethod
    def _key(job_key: str, metric: str) -> str:
        return f"{job_key}\x1f{metric}"

    def fresh(self, job_key: str, records: Iterable[ScoreRecord]) -> list[ScoreRecord]:
        """The records not delivered yet, one per step, in step order."""
        out: dict[int, ScoreRecord] = {}
        with self._lock:
            for rec in records:
                sent = self._sent.get(self._key(job_key, rec.metric), {})
                if rec.step in sent:
                    if not _same(sent[rec.step], rec.value):
                        log.warning("job %s %s step %d: value changed %r -> %r in the source; keeping the "
                                    "delivered one", job_key, rec.metric, rec.step, sent[rec.step], rec.value)
                    continue
                out.setdefault(rec.step, rec)
        return [out[s] for s in sorted(out)]

    def commit(self, job_key: str, records: Iterable[ScoreRecord]) -> None:
        with self._lock:
            for rec in records:
                self._sent.setdefault(self._key(job_key, rec.metric), {})[rec.step] = rec.value
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        payload = {k: {str(s): v for s, v in steps.items()} for k, steps in self._sent.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp", dir=self.path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh)
        os.replace(tmp, self.path)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@dataclass
class PollStats:
    delivered: int = 0
    invalid: int = 0
    errors: dict[str, str] = field(default_factory=dict)  # job key -> last error


class Poller(ABC):
    """Base of every poller: ``fetch`` is the only source-specific part."""

    kind: str = ""

    def __init__(self, sink: Sink, cursor: Cursor | None = None) -> None:
        self.sink = sink
        self.cursor = cursor if cursor is not None else Cursor()

    @abstractmethod
    def fetch(self) -> Mapping[str, Sequence[ScoreRecord]]:
        """Every record currently visible in the source, by job key."""

    def poll(self) -> PollStats:
        """Deliver what is new; a failing job (source or sink) is logged and retried next poll."""
        stats = PollStats()
        for job_key, records in self.fetch().items():
            valid = [r for r in records if math.isfinite(r.value) and r.step >= 0]
            invalid = [r for r in records if not (math.isfinite(r.value) and r.step >= 0)]
            fresh, bad = self.cursor.fresh(job_key, valid), self.cursor.fresh(job_key, invalid)
            try:
                if fresh:
                    self.sink(job_key, fresh)
            except Exception as exc:  # one job's failing ingest must not block the others
                log.warning("job %s: sink failed, will retry: %s", job_key, exc)
                stats.errors[job_key] = f"{type(exc).__name__}: {exc}"
                continue
            if bad:
                log.warning("job %s: %d non-finite or negative-step evals dropped", job_key, len(bad))
            self.cursor.commit(job_key, [*fresh, *bad])
            stats.delivered += len(fresh)
            stats.invalid += len(bad)
        return stats


class ReaderPoller(Poller):
    """A poller over one :class:`~evalstop.logs.LogReader` per job: each poll reads what is new
    and keeps it with what was read before (the cursor says what was delivered; a failed
    delivery is retried from here). ``checkpoint(job_key, record)`` names a record's checkpoint
    where the reader does not."""

    def __init__(self, sink: Sink, readers: Mapping[str, LogReader], cursor: Cursor | None = None) -> None:
        super().__init__(sink, cursor)
        self.readers = dict(readers)
        self._read: dict[str, list[ScoreRecord]] = {}

    def checkpoint(self, job_key: str, record: ScoreRecord) -> str | None:
        return record.checkpoint_uri

    def fetch(self) -> Mapping[str, Sequence[ScoreRecord]]:
        for job_key, reader in self.readers.items():
            if not reader.exists():
                log.info("job %s: no %s yet", job_key, reader.location)
                continue
            new = reader.read()
            named = [replace(r, checkpoint_uri=self.checkpoint(job_key, r)) for r in new]
            self._read.setdefault(job_key, []).extend(named)
        return self._read


def run_pollers(pollers: Sequence[Poller], interval_s: float, stop: threading.Event) -> None:
    """Poll every poller each ``interval_s`` until ``stop`` is set (run it in a thread)."""
    while not stop.is_set():
        for poller in pollers:
            try:
                poller.poll()
            except Exception:  # a broken source is logged, the loop goes on
                log.exception("poller %s failed", poller.kind)
        stop.wait(interval_s)
