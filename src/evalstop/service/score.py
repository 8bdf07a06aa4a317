"""The one shape of a score on its way in: :class:`ScoreIn`, from the route (or a puller) to the
store. Its fields are checked once, by :func:`~evalstop.service.ingest.check_batch`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScoreIn:
    """One eval score as a client or a puller reports it. ``metric`` None = the job's metric."""

    step: int
    value: float
    checkpoint_uri: str | None = None
    ts: float | None = None
    metric: str | None = None
    progress: float | None = None
    loss: float | None = None
