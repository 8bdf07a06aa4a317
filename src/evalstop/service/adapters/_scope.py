"""The pieces every backend's scope section is built from: the section base, the entry checks,
and the URI rules (traversal, prefixes on ``/`` boundaries) that both scopes and pins use.

A section is validated twice over its life: as declared by the operator (every entry checked),
and as read back from the database (``context=STORED``): entry checks added after a row was
stored are skipped there, so an old row still loads (an empty entry matches nothing anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from posixpath import normpath
from typing import Annotated
from urllib.parse import unquote, urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo

#: Validation context for a scope read back from the database.
STORED = {"stored": True}


class ScopeSection(BaseModel):
    """A backend's section of a tenant's scope (``{"slurm": {...}}``): frozen, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def declared(info: ValidationInfo) -> bool:
    """Whether the value is being declared (checked in full), not read back from the database."""
    return not (isinstance(info.context, dict) and info.context.get("stored"))


def _entry(value: str, info: ValidationInfo) -> str:
    """A name in a scope list (a Slurm account, a label key): not empty, no whitespace."""
    if declared(info) and (not value or value != value.strip() or any(c.isspace() for c in value)):
        raise ValueError(f"must be a non-empty name without whitespace, got {value!r}")
    return value


Entry = Annotated[str, AfterValidator(_entry)]


def has_traversal(uri: str) -> bool:
    """A ``..`` or ``.`` segment, also percent-encoded (``%2e%2e``), or a NUL byte."""
    for text in (uri, unquote(uri)):
        if "\x00" in text or any(seg in (".", "..") for seg in text.split("/")[1:]):
            return True
    return False


def as_uri(text: str) -> str:
    """An absolute path as a ``file://`` URI; anything else as it is."""
    return "file://" + text if text.startswith("/") else text


def checkpoint_allowed(uri: str, prefixes: Sequence[str]) -> bool:
    """``uri`` is under one of ``prefixes`` (compared on ``/`` boundaries, after refusing any
    traversal). Plain paths are compared as ``file://`` URIs."""
    if has_traversal(uri):
        return False
    full = as_uri(uri)
    for prefix in prefixes:
        base = as_uri(prefix).rstrip("/")
        if base and (full == base or full.startswith(base + "/")):
            return True
    return False


def local_roots(prefixes: Sequence[str]) -> list[str]:
    """The filesystem directories among ``prefixes`` (``file://`` or absolute paths)."""
    roots = []
    for prefix in prefixes:
        uri = as_uri(prefix)
        if uri.startswith("file://"):
            roots.append(normpath(unquote(urlsplit(uri).path)))
    return roots
