"""Pin markers confined to a tenant's checkpoint roots, safe against symlinks.

The path is first checked as text (no ``..``/``.`` segment, also percent-encoded; under a
declared root), then walked from the root one component at a time with directory file
descriptors opened ``O_NOFOLLOW``: a symlink anywhere below the root, including one swapped
in after the text check, makes the walk fail and nothing is written. The marker is written
through the final directory's descriptor (``O_CREAT|O_EXCL|O_NOFOLLOW`` temp file, then
``rename`` within that directory), so no path is resolved again after the walk. The roots
themselves are the operator's and may be symlinks.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from evalstop.service.adapters._scope import has_traversal

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class PinRefused(Exception):
    """The checkpoint lies outside the tenant's roots, or a symlink is in the way."""


def split_under_root(path: str, roots: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """``(root, components below it)`` for the first root ``path`` lies under, else raise."""
    if has_traversal(path):
        raise PinRefused(f"{path!r} contains a '.' or '..' segment")
    parts = PurePosixPath(path).parts
    for root in roots:
        root_parts = PurePosixPath(root).parts
        if len(parts) > len(root_parts) and parts[: len(root_parts)] == root_parts:
            return root, parts[len(root_parts):]
    raise PinRefused(f"{path!r} is outside the tenant's checkpoint roots {list(roots)}")


def write_confined_marker(path: str, roots: Sequence[str], marker: str, record: Mapping[str, Any]) -> str:
    """Write ``record`` as ``marker`` inside the checkpoint directory ``path`` (or as
    ``<name><marker>`` beside a checkpoint file); return where. Raises :class:`PinRefused`."""
    root, below = split_under_root(path, roots)
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))]
    try:
        for name in below[:-1]:
            fds.append(_open_dir(name, fds[-1], path))
        last = below[-1]
        try:
            info = os.stat(last, dir_fd=fds[-1], follow_symlinks=False)
        except FileNotFoundError as exc:
            raise PinRefused(f"{path!r} does not exist") from exc
        if stat.S_ISDIR(info.st_mode):
            fds.append(_open_dir(last, fds[-1], path))
            name = marker
        elif stat.S_ISREG(info.st_mode):
            name = last + marker
        else:
            raise PinRefused(f"{path!r} is a symlink or not a regular file or directory")
        _write_at(fds[-1], name, record)
        return str(PurePosixPath(path) / marker) if name == marker else path + marker
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _open_dir(name: str, parent: int, path: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:  # ELOOP / ENOTDIR: a symlink or a file where a directory should be
        raise PinRefused(f"{path!r}: component {name!r} is not a plain directory ({exc.strerror})") from exc


def _write_at(dir_fd: int, name: str, record: Mapping[str, Any]) -> None:
    """Atomically (re)write ``name`` in ``dir_fd``, unless it already holds the same URI."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        with os.fdopen(fd) as fh:
            if json.load(fh).get("checkpoint_uri") == record.get("checkpoint_uri"):
                return
    except (OSError, ValueError):
        pass
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "w") as fh:
        json.dump(dict(record), fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
