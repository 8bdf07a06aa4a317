"""Confirmation evals: a second, larger look at the checkpoint before a stop.

When a ``Monitor`` built with a ``Confirm`` sees its rule fire, it does not stop: it asks for a
*confirmation eval* at the same checkpoint, ``size`` times the routine eval (``NextEval.confirm``),
and stops only if that eval agrees that the checkpoint is worse than the best one so far.

The test (``Confirm.agrees``), by what the two evals carry:

- **paired**, when the best eval and the confirmation both have per-prompt scores (``items``):
  the confirmation's prompts begin with the routine eval's, in the same order, so the first
  ``len(best items)`` of them are paired with the best eval's. ``z`` is the mean paired drop over
  its standard error; the spread of prompt difficulty cancels.
- **unpaired** otherwise: the drop from the best score to the confirmation's score over
  ``sqrt(se_best^2 + se_confirm^2)``. ``se_confirm`` is the confirmation's ``stderr`` (or the
  standard error of its items); ``se_best`` is the best eval's ``stderr`` when it had one, else
  ``se_confirm * sqrt(size)`` (the routine eval has ``1/size`` of the prompts).

It agrees when ``z >= self.z`` (default 3: a one-sided false agreement of about 1 in 740 when the
checkpoint is as good as the best, before the winner's curse of comparing with the best of many
noisy evals, which makes agreement more likely). A confirmation with a NaN/inf score, or with
neither a standard error nor items, cannot agree: it clears the alarm (a missing eval never stops
a job).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._validation import check_float, check_int
from ._base import Eval, is_valid
from ._noise import finite_items, mean_and_se

#: Bounds of the parameters: a confirmation of more than 100 routine evals, or a test stricter
#: than 20 standard errors, is a typo rather than a choice.
MAX_SIZE = 100
MAX_Z = 20.0


@dataclass(frozen=True, slots=True)
class Confirm:
    """Confirm each alarm with an eval ``size`` routine evals large; stop when it is ``z``
    standard errors below the best eval (see the module docstring)."""

    size: int = 4
    z: float = 3.0

    def __post_init__(self) -> None:
        check_int("Confirm", "size", self.size, min_value=1, max_value=MAX_SIZE)
        check_float("Confirm", "z", self.z, low=0.0, high=MAX_Z, low_open=True)

    def agrees(
        self, sign: float, best_score: float, best_stderr: float | None,
        best_items: Sequence[float] | None, ev: Eval,
    ) -> tuple[bool, str]:
        """Whether the confirmation ``ev`` agrees that its checkpoint is worse than the best
        eval (``sign`` 1 for mode max, -1 for min), and how that was decided."""
        if not is_valid(ev.score):
            return False, "confirmation score is not finite"
        items = finite_items(ev)
        if best_items and items is not None and len(items) >= 2 and len(best_items) >= 2:
            m = min(len(best_items), len(items))
            drop, se = mean_and_se([sign * (b - c) for b, c in zip(best_items[:m], items[:m], strict=True)])
            return self._verdict(drop, se, f"paired on {m} items")
        se_confirm = ev.stderr if ev.stderr is not None and math.isfinite(ev.stderr) else None
        if se_confirm is None and items is not None:
            se_confirm = mean_and_se(items)[1]
        if se_confirm is None:
            return False, "confirmation has no stderr or items"
        if best_stderr is None or not math.isfinite(best_stderr):
            best_stderr = se_confirm * math.sqrt(self.size)
        return self._verdict(sign * (best_score - ev.score), math.hypot(best_stderr, se_confirm), "unpaired")

    def _verdict(self, drop: float, se: float, how: str) -> tuple[bool, str]:
        if se <= 0.0:
            return drop > 0.0, f"{how}, drop {drop:.4g} with no spread"
        z = drop / se
        word = ">=" if z >= self.z else "<"
        return z >= self.z, f"{how}, z={z:.3g} {word} {self.z:g}"

    # -- spec and JSON -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "z": self.z}

    @classmethod
    def from_json(cls, data: Confirm | Mapping[str, Any] | None) -> Confirm | None:
        """A ``Confirm`` from itself, its ``to_json`` dict, or None (no confirmation)."""
        if data is None or isinstance(data, Confirm):
            return data
        unknown = set(data) - {"size", "z"}
        if unknown:
            raise ValueError(f"Unknown confirmation parameter(s) {sorted(unknown)}. Valid: size, z.")
        return cls(int(data.get("size", 4)), float(data.get("z", 3.0)))


def parse_confirm(spec: str) -> Confirm:
    """``""`` (the defaults), ``size=4``, ``size=8,z=2.5`` -> a ``Confirm``; ValueError naming
    the bad part."""
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, raw = (s.strip() for s in item.partition("="))
        if key not in ("size", "z") or not sep:
            raise ValueError(f"Confirmation parameters are size=INT and z=FLOAT. Got {item!r} in {spec!r}.")
        try:
            params[key] = int(raw) if key == "size" else float(raw)
        except ValueError:
            raise ValueError(f"The {key!r} confirmation parameter must be a number. Got {raw!r}.") from None
    return Confirm(**params)
