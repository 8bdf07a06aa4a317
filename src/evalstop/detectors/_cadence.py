"""Eval cadence policies: after each eval, when is the next one worth running?

A job can evaluate at regular *opportunities* (every ``eval_steps`` training steps, or every
row of a dense curves file). A policy picks which opportunities to use. It counts in
opportunities (``after``: 1 is the next one), so the same policy means the same thing to the
replay tool (rows of a dense file), the HF callback (multiples of ``eval_steps``) and a service
client (which knows its own interval). Like a rule, a policy is a frozen dataclass of parameters
with a spec string (``every:3``, ``adaptive:every=3,dense=1``) and keeps no per-job state: the
``Monitor`` holds the latest hint in its JSON state.

- ``every:N`` uses every N-th opportunity (the N-th, 2N-th, ...); ``every:1`` is dense.
- ``adaptive:every=N,dense=M`` uses every N-th opportunity while the evidence is quiet and every
  M-th while it is *elevated*: the rule says so (``Detector.elevated``; by default, the latest
  valid eval is not the running best). It asks for evidence where a decline may have started.

``DEFAULT_CADENCE`` is ``every:1``: a monitor that is given no policy asks for every eval, as
before policies existed.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from .._validation import check_int

DEFAULT_CADENCE = "every:1"
#: The most opportunities a policy may skip (``every:N``): a job evaluating every step would
#: still be watched every 10,000 steps, and a hint's step stays far inside an int64.
MAX_AFTER = 10_000


@dataclass(frozen=True, slots=True)
class NextEval:
    """The hint after an eval: run the next eval ``after`` opportunities from the last one (at
    ``step`` when the eval interval is known), and whether the evidence is ``elevated``.
    ``done``: the rule has fired, no further eval is needed. ``confirm`` > 0: the next eval is a
    confirmation eval of that many routine evals' size, at the latest eval's checkpoint
    (``after`` is then 0 and ``step`` the alarm's; ``_confirm.py``)."""

    after: int
    step: int | None
    elevated: bool
    done: bool = False
    confirm: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON values, as the service's score reply and the remote client carry them
        (``confirm`` only when a confirmation is asked for)."""
        out: dict[str, Any] = {
            "after": self.after, "step": self.step, "elevated": self.elevated, "done": self.done,
        }
        if self.confirm:
            out["confirm"] = self.confirm
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NextEval:
        step = data.get("step")
        return cls(int(data["after"]), None if step is None else int(step), bool(data["elevated"]),
                   bool(data.get("done", False)), int(data.get("confirm", 0)))


class CadencePolicy(ABC):
    """Which eval opportunities to use. Subclasses are frozen dataclasses of parameters."""

    name: str = ""

    @abstractmethod
    def after(self, elevated: bool) -> int:
        """Opportunities from the latest eval (or from the job's start) to the next one."""

    @property
    def first(self) -> int:
        """The opportunity of the first eval (1-based)."""
        return self.after(False)


@dataclass(frozen=True, slots=True)
class Every(CadencePolicy):
    """Every ``n``-th opportunity, whatever the evidence."""

    n: int = 1
    name = "every"

    def __post_init__(self) -> None:
        check_int("Every", "n", self.n, min_value=1, max_value=MAX_AFTER)

    def after(self, elevated: bool) -> int:
        return self.n


@dataclass(frozen=True, slots=True)
class Adaptive(CadencePolicy):
    """Every ``every``-th opportunity while quiet, every ``dense``-th while elevated."""

    every: int = 3
    dense: int = 1
    name = "adaptive"

    def __post_init__(self) -> None:
        check_int("Adaptive", "every", self.every, min_value=1, max_value=MAX_AFTER)
        check_int("Adaptive", "dense", self.dense, min_value=1, max_value=MAX_AFTER)
        if self.dense > self.every:
            raise ValueError(f"The 'dense' parameter of Adaptive must be <= every={self.every}. "
                             f"Got {self.dense!r} instead.")

    def after(self, elevated: bool) -> int:
        return self.dense if elevated else self.every


POLICIES: dict[str, type[CadencePolicy]] = {cls.name: cls for cls in (Every, Adaptive)}


def parse_cadence(spec: str) -> CadencePolicy:
    """``every:3``, ``every:n=3``, ``adaptive``, ``adaptive:every=3,dense=1`` -> a policy;
    ValueError naming what is wrong."""
    name, _, text = spec.strip().partition(":")
    cls = POLICIES.get(name.strip())
    if cls is None:
        raise ValueError(f"Unknown cadence {name.strip()!r} in {spec!r}. Valid cadences: "
                         f"{', '.join(POLICIES)} (e.g. every:3, adaptive:every=3,dense=1).")
    names = [f.name for f in dataclasses.fields(cast(Any, cls))]
    params: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = (s.strip() for s in item.partition("="))
        if not sep:  # a bare value is the first parameter: every:3
            key, raw = names[0], key
        if key not in names:
            raise ValueError(f"Unknown parameter {key!r} for cadence {name!r}. Valid parameters: "
                             f"{', '.join(names)}.")
        try:
            params[key] = int(raw)
        except ValueError:
            raise ValueError(f"The {key!r} parameter of cadence {name!r} must be an int. "
                             f"Got {raw!r} instead.") from None
    return cast(Callable[..., CadencePolicy], cls)(**params)


def format_cadence(policy: CadencePolicy) -> str:
    """The spec that rebuilds ``policy`` (every parameter written)."""
    fields = dataclasses.fields(cast(Any, policy))
    return policy.name + ":" + ",".join(f"{f.name}={getattr(policy, f.name)}" for f in fields)
