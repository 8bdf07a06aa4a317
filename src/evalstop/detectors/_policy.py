"""What a job does when its rule fires: stop, or rewind to the best checkpoint with a correction.

``OnDetect(on_detect="rewind", max_rewinds=1, correction="kl_coef*=2,lr*=0.5")``: at a
detection the job goes back to its best checkpoint, applies the correction and trains on; after
``max_rewinds`` rewinds, the next detection stops it. ``OnDetect()`` (the default) stops at the
first detection, as EvalStop always did.

A correction is a spec string of comma-separated knob changes, each ``knob=value`` (set it) or
``knob*=factor`` (scale it). The knobs are ``kl_coef`` (the KL penalty to the reference policy:
TRL's ``beta``), ``lr`` (the optimizer's learning rate) and ``ref`` (the reference policy itself:
``ref=best`` makes the checkpoint the job rewinds to its new KL anchor; it is set, never scaled).
Each knob appears at most once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._validation import InvalidParameterError, check_choice, check_int

#: The knobs a correction may change, with what they are in a trainer.
KNOBS = {"kl_coef": "the KL coefficient (TRL's beta)", "lr": "the optimizer's learning rate",
         "ref": "the reference policy of the KL penalty"}
#: What ``ref`` may be set to: ``best``, the checkpoint the job rewinds to.
REF_TARGETS = ("best",)
ACTIONS = ("stop", "rewind")
#: The most rewinds a policy may allow (a service bounds it lower: its ``max_rewinds`` setting).
MAX_REWINDS = 1000


@dataclass(frozen=True)
class Change:
    """One knob change: ``op`` is "=" (set to ``value``) or "*=" (multiply by ``value``)."""

    knob: str
    op: str
    value: float

    def apply(self, current: float) -> float:
        return self.value if self.op == "=" else current * self.value

    def __str__(self) -> str:
        return f"{self.knob}{self.op}{self.value:g}"


@dataclass(frozen=True)
class Reset:
    """A knob set to a named target rather than a number: ``ref=best``."""

    knob: str
    target: str

    def __str__(self) -> str:
        return f"{self.knob}={self.target}"


@dataclass(frozen=True)
class Correction:
    """The parsed form of a correction spec (see the module docstring)."""

    changes: tuple[Change | Reset, ...] = ()

    @classmethod
    def parse(cls, spec: str, owner: str = "OnDetect") -> Correction:
        """Parse ``spec``; raise InvalidParameterError naming the bad part."""
        if not isinstance(spec, str):
            raise InvalidParameterError(
                f"The 'correction' parameter of {owner} must be a spec string such as 'kl_coef*=2,lr*=0.5'. "
                f"Got {spec!r} instead."
            )
        changes: list[Change | Reset] = []
        for item in filter(None, (part.strip() for part in spec.split(","))):
            change = _parse_change(item, spec, owner)
            if any(c.knob == change.knob for c in changes):
                raise InvalidParameterError(
                    f"The 'correction' parameter of {owner} changes {change.knob!r} twice in {spec!r}."
                )
            changes.append(change)
        return cls(tuple(changes))

    def get(self, knob: str) -> Change | None:
        """The numeric change of ``knob`` (``kl_coef``, ``lr``), if any."""
        return next((c for c in self.changes if c.knob == knob and isinstance(c, Change)), None)

    @property
    def ref(self) -> str | None:
        """Where the KL reference moves at the rewind (``"best"``), or None: it stays."""
        return next((c.target for c in self.changes if isinstance(c, Reset)), None)

    def __str__(self) -> str:
        return ",".join(str(c) for c in self.changes)


def _parse_change(item: str, spec: str, owner: str) -> Change | Reset:
    scale = "*=" in item
    knob, sep, raw = (s.strip() for s in item.partition("*=" if scale else "="))
    if not sep or not knob:
        raise InvalidParameterError(
            f"The 'correction' parameter of {owner} has a malformed part {item!r} in {spec!r}; "
            f"expected knob=value or knob*=factor."
        )
    if knob not in KNOBS:
        raise InvalidParameterError(
            f"The 'correction' parameter of {owner} names an unknown knob {knob!r} in {spec!r}. "
            f"Valid knobs: {', '.join(KNOBS)}."
        )
    if knob == "ref":
        if scale or raw not in REF_TARGETS:
            raise InvalidParameterError(
                f"The 'correction' parameter of {owner} can only set 'ref' to one of "
                f"{', '.join(REF_TARGETS)} (ref=best: the KL reference becomes the checkpoint the job "
                f"rewinds to). Got {item!r} in {spec!r}."
            )
        return Reset(knob, raw)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    low_ok = value > 0.0 if (scale or knob == "lr") else value >= 0.0
    if not (math.isfinite(value) and low_ok):
        what = "factor" if scale else "value"
        bound = "> 0" if (scale or knob == "lr") else ">= 0"
        raise InvalidParameterError(
            f"The 'correction' parameter of {owner} needs a finite {what} {bound} for {knob!r}. "
            f"Got {raw!r} in {spec!r}."
        )
    return Change(knob, "*=" if scale else "=", value)


@dataclass(frozen=True)
class OnDetect:
    """A job's policy at a detection: ``on_detect`` "stop" | "rewind", at most ``max_rewinds``
    rewinds (then a detection stops the job), each applying ``correction``."""

    on_detect: str = "stop"
    max_rewinds: int = 1
    correction: str = ""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_choice(owner, "on_detect", self.on_detect, ACTIONS)
        check_int(owner, "max_rewinds", self.max_rewinds, min_value=0, max_value=MAX_REWINDS)
        parsed = Correction.parse(self.correction, owner)
        if self.on_detect == "rewind" and not parsed.changes:
            raise InvalidParameterError(
                f"The 'correction' parameter of {owner} must name at least one change (e.g. 'kl_coef*=2') "
                f"when on_detect='rewind': a rewind without one would retrain the same way. Got "
                f"{self.correction!r} instead."
            )
        if self.on_detect == "stop" and parsed.changes:
            raise InvalidParameterError(
                f"The 'correction' parameter of {owner} is only used with on_detect='rewind'. Got "
                f"{self.correction!r} with on_detect='stop'."
            )
        object.__setattr__(self, "correction", str(parsed))  # one canonical spelling

    @property
    def parsed(self) -> Correction:
        return Correction.parse(self.correction)

    @property
    def rewinds(self) -> bool:
        return self.on_detect == "rewind" and self.max_rewinds > 0

    def to_json(self) -> dict[str, Any]:
        return {"on_detect": self.on_detect, "max_rewinds": self.max_rewinds, "correction": self.correction}

    @classmethod
    def from_json(cls, data: OnDetect | Mapping[str, Any] | None) -> OnDetect:
        """An ``OnDetect`` from itself, its ``to_json()`` dict, or None (the stop policy)."""
        if data is None:
            return STOP
        if isinstance(data, OnDetect):
            return data
        if not isinstance(data, Mapping):
            raise InvalidParameterError(
                f"An on-detect policy must be a dict with on_detect, max_rewinds and correction. "
                f"Got {data!r} instead."
            )
        unknown = sorted(set(data) - {"on_detect", "max_rewinds", "correction"})
        if unknown:
            raise InvalidParameterError(
                f"Unknown on-detect policy parameter(s) {unknown}. Valid: on_detect, max_rewinds, correction."
            )
        return cls(**data)


#: The default: stop at the first detection.
STOP = OnDetect()
