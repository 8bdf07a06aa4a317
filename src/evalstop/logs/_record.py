"""One eval score read from a log, and the interface every log reader has."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path


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


class PathReader(LogReader):
    """A reader of one path (a file or a directory of them) that collects metric names as it
    reads: ``location`` is the path, ``names()`` what it collected."""

    def __init__(self, path: str | Path, metric: str) -> None:
        self.path, self.metric = Path(path), metric
        self._names: set[str] = set()

    @property
    def location(self) -> str:
        return str(self.path)

    def exists(self) -> bool:
        return self.path.exists()

    def names(self) -> list[str]:
        return sorted(self._names)


def read_from(path: Path, offset: int) -> bytes:
    """The bytes of ``path`` after ``offset`` (empty when there are none or it cannot be read:
    not written yet, or removed between listing and reading)."""
    try:
        if path.stat().st_size <= offset:
            return b""
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


def whole_lines(buf: bytes) -> bytes:
    """``buf`` up to its last newline: a line still being written waits for the next read."""
    return buf[: buf.rfind(b"\n") + 1]
