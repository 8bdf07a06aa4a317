"""Text files that are gzip-compressed when their name ends in ``.gz``."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any


def open_text(path: Path, mode: str) -> Any:
    """A text file, gzip-compressed when the name ends in ``.gz`` (written with ``mtime=0``, so
    the same rows give the same bytes)."""
    if path.suffix != ".gz":
        return path.open(mode, newline="", encoding="utf-8")
    if mode == "r":
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return _GzipWriter(path)


class _GzipWriter:
    def __init__(self, path: Path) -> None:
        self.file = path.open("wb")
        self.text = io.TextIOWrapper(
            gzip.GzipFile(filename="", mode="wb", fileobj=self.file, mtime=0), encoding="utf-8", newline=""
        )

    def __enter__(self) -> io.TextIOWrapper:
        return self.text

    def __exit__(self, *exc: object) -> None:
        self.text.close()
        self.file.close()
