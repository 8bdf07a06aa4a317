"""Detector specs: ``name`` or ``name:param=value,...`` <-> a configured detector.

``evalstop:k=3,min_delta=0.01,against=best`` builds ``KDeclines(k=3, min_delta=0.01,
against="best")``. Values are read as int, then float, then bool (``true``/``false``), then
str; the detector's constructor validates them. ``format_spec`` writes the parameters that
differ from the defaults, so ``parse_spec(format_spec(d)) == d``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from functools import lru_cache
from typing import cast

from ._base import Detector
from ._cusum import Cusum
from ._fixed_progress import FixedProgress
from ._kdeclines import KDeclines
from ._loss_plateau import LossPlateau
from ._mann_kendall import MannKendall
from ._never import NeverStop
from ._noise_aware import NoiseAware
from ._paired import Paired
from ._patience import Patience
from ._slaq import SlaqLoss

#: The rule users get unless they name one: CUSUM of drops below the best in units of the
#: eval noise, with cusum's absolute floor (``min_delta``). Chosen by ``evalstop validate`` with
#: each bank family held out (numpy and TRL GRPO families), by its worst result over 10 and 40
#: evals per job (docs/noise-rules.md); the paper's rule stays available as "evalstop".
DEFAULT_SPEC = "cusum:threshold=3.0,drift=3.0"

REGISTRY: dict[str, type[Detector]] = {
    cls.name: cls
    for cls in (
        *(KDeclines, NeverStop, FixedProgress, LossPlateau, SlaqLoss),
        *(Patience, Cusum, MannKendall, Paired, NoiseAware),
    )
}

Value = int | float | bool | str
_NAMED_INF = re.compile(r"^\s*[+-]?inf(inity)?\s*$", re.IGNORECASE)
_NONZERO = re.compile(r"[1-9]")


def parameter_names(cls: type[Detector]) -> tuple[str, ...]:
    """The constructor parameters of a registered detector class, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cast(type, cls)) if f.init)


def parse_value(text: str) -> Value:
    """``text`` as an int, a float, a bool or else itself; ValueError for a number that no float
    holds: one beyond 1.8e308 (it would read as inf) or a nonzero one that reads as 0 (1e-400)."""
    for convert in (int, float):
        try:
            value = cast(Value, convert(text))
        except ValueError:
            continue
        if isinstance(value, float) and math.isinf(value) and not _NAMED_INF.match(text):
            raise ValueError(f"{_clip(text)} is too large for a float (at most 1.8e308)")
        if value == 0 and _NONZERO.search(text.partition("e")[0].partition("E")[0]):
            raise ValueError(f"{_clip(text)} is too small to be told from 0 (the least float is 5e-324)")
        return value
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return text


def _clip(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def parse_spec(spec: str) -> Detector:
    """Build the detector that ``spec`` names; raise ValueError naming what is wrong."""
    name, _, params_text = spec.strip().partition(":")
    name = name.strip()
    cls = REGISTRY.get(name)
    if cls is None:
        valid = ", ".join(sorted(REGISTRY))
        raise ValueError(f"Unknown detector {name!r} in spec {spec!r}. Valid detectors: {valid}.")
    valid_params = parameter_names(cls)
    params: dict[str, Value] = {}
    for item in filter(None, (part.strip() for part in params_text.split(","))):
        key, sep, raw = (s.strip() for s in item.partition("="))
        if not sep or not key:
            raise ValueError(f"Malformed parameter {item!r} in spec {spec!r}; expected name=value.")
        if key not in valid_params:
            raise ValueError(
                f"Unknown parameter {key!r} for detector {name!r}. "
                f"Valid parameters: {', '.join(valid_params)}."
            )
        if key in params:
            raise ValueError(f"Parameter {key!r} given twice in spec {spec!r}.")
        try:
            params[key] = parse_value(raw)
        except ValueError as exc:
            raise ValueError(f"The {key!r} parameter of {name}: {exc}.") from None
    return cast(Callable[..., Detector], cls)(**params)


#: id(detector) -> (detector, its spec): a detector is frozen, so its spec never changes, and a
#: job's monitor formats it on every stored score (a few percent of a single score's CPU, by
#: profile). The detector is held, so its id is not reused while it is here; emptied when full.
_FORMATTED: dict[int, tuple[Detector, str]] = {}
_FORMATTED_MAX = 4096


def format_spec(detector: Detector) -> str:
    """The spec that rebuilds ``detector``: its name plus every non-default parameter."""
    hit = _FORMATTED.get(id(detector))
    if hit is not None and hit[0] is detector:
        return hit[1]
    spec = _format_spec(detector)
    if len(_FORMATTED) >= _FORMATTED_MAX:
        _FORMATTED.clear()
    _FORMATTED[id(detector)] = (detector, spec)
    return spec


def _format_spec(detector: Detector) -> str:
    if not dataclasses.is_dataclass(detector):
        raise TypeError(f"format_spec needs a dataclass detector. Got {detector!r} instead.")
    parts = []
    for f in dataclasses.fields(detector):
        value = getattr(detector, f.name)
        if f.init and value != f.default:
            parts.append(f"{f.name}={_format_value(value)}")
    return detector.name + (":" + ",".join(parts) if parts else "")


def _format_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


@lru_cache(maxsize=1024)
def detector_for(spec: str) -> Detector:
    """``parse_spec`` with one object per spec: detectors are frozen and hashable, so every
    monitor that loads a spec (a service job, a replayed one) can share it."""
    return parse_spec(spec)
