"""A recording sink for poller tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from evalstop.service.pull import ScoreRecord


@dataclass
class RecordingSink:
    calls: list[tuple[str, list[ScoreRecord]]] = field(default_factory=list)
    fail_for: set[str] = field(default_factory=set)

    def __call__(self, job_key: str, records: Sequence[ScoreRecord]) -> None:
        if job_key in self.fail_for:
            raise RuntimeError(f"ingest unavailable for {job_key}")
        self.calls.append((job_key, list(records)))

    def steps(self, job_key: str) -> list[int]:
        return [r.step for k, recs in self.calls if k == job_key for r in recs]
