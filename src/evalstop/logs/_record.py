"""One eval score read from a log, and the interface every log reader has."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class ScoreRecord:
    """One eval: ``ts`` in unix seconds when the source has it."""

    step: int
    value: float
    metric: str
    checkpoint_uri: str | None = None
    ts: float | None = None


class LogReader(ABC):
    """Reads one metric from one run's log, incrementally.

    ``read()`` returns the records of ``metric`` that appeared since the previous call, in the
    order the log holds them (a rewritten value comes back as a new record; what to do with it
    is the caller's choice). A source that does not exist yet reads as empty. ``names()`` lists
    every metric name the source has shown so far, to say what exists when ``metric`` does not.
    """

    metric: str = ""

    @abstractmethod
    def read(self) -> list[ScoreRecord]:
        """The records of ``metric`` new since the previous call."""

    @abstractmethod
    def names(self) -> list[str]:
        """Every metric name seen so far, sorted."""

    @abstractmethod
    def exists(self) -> bool:
        """Whether the source (directory, file, run) exists yet."""

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the reader looks, for messages."""
