"""Data sets shipped inside the package (see ``NOTICE.md`` here: Apache-2.0, petuum/adaptdl).

* ``philly.csv.gz``: the Philly-derived job trace (:func:`philly_path`).
* ``supervised-curves.tar.gz``: real supervised validation curves (:func:`supervised_csvs`).
"""

from __future__ import annotations

import gzip
import tarfile
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

__all__ = ["checksums", "philly_path", "read_philly_bytes", "supervised_csvs"]

_PHILLY = "philly.csv.gz"
_CURVES = "supervised-curves.tar.gz"


def _path(name: str) -> Path:
    # The package is installed as plain files (setuptools, editable or not), so this is a Path.
    return Path(str(files(__name__) / name))


def philly_path() -> Path:
    """The packaged Philly trace (gzip-compressed CSV)."""
    return _path(_PHILLY)


def read_philly_bytes(path: Path | None = None) -> bytes:
    """The trace's CSV bytes, decompressing when the file name ends in ``.gz``."""
    path = path or philly_path()
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.suffix == ".gz" else raw


@lru_cache(maxsize=1)
def supervised_csvs() -> tuple[tuple[str, bytes], ...]:
    """``(model/validation-<batch>.csv, content)`` for every packaged supervised curve, sorted."""
    out = []
    with tarfile.open(_path(_CURVES), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".csv"):
                handle = tar.extractfile(member)
                if handle is not None:
                    out.append((member.name.removeprefix("supervised-curves/"), handle.read()))
    return tuple(sorted(out))


def checksums() -> dict[str, str]:
    """Upstream path -> SHA-256 of its uncompressed content (from ``SHA256SUMS``)."""
    text = _path("SHA256SUMS").read_text(encoding="utf-8")
    return {name: digest for digest, name in (line.split(maxsplit=1) for line in text.splitlines() if line)}
