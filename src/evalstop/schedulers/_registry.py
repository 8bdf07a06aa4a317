"""Base schedulers by name, for experiment specs and the CLI."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .._validation import InvalidParameterError, check_choice
from ._base import Scheduler
from .fairshare import FairShare
from .fifo import FIFO
from .gittins import Gittins
from .las import LAS
from .srtf import SRTFEst

#: Read-only: name -> base scheduler class (each class's ``name`` attribute is its key).
SCHEDULERS: Mapping[str, type[Scheduler]] = MappingProxyType(
    {"fifo": FIFO, "srtf": SRTFEst, "las": LAS, "gittins": Gittins, "fair": FairShare}
)


def _accepted_params(cls: type[Scheduler]) -> set[str] | None:
    """Keyword parameters of ``cls``'s constructor, or None if it takes ``**kwargs``."""
    params = inspect.signature(cls).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in params if p.kind in keyword_kinds}


def make_scheduler(name: str, **params: Any) -> Scheduler:
    """Build the base scheduler registered as ``name`` with constructor ``params``.

    Raises InvalidParameterError for an unknown name (listing the valid ones) or a parameter the
    scheduler does not take (listing the ones it does); never drops a parameter silently.
    """
    check_choice("make_scheduler", "name", name, SCHEDULERS)
    cls = SCHEDULERS[name]
    accepted = _accepted_params(cls)
    unknown = sorted(set(params) - accepted) if accepted is not None else []
    if unknown:
        valid = ", ".join(repr(p) for p in sorted(accepted or ())) or "none"
        names = ", ".join(repr(p) for p in unknown)
        raise InvalidParameterError(
            f"Unknown parameter(s) {names} for scheduler {name!r}. Valid parameters: {valid}."
        )
    return cls(**params)
