"""Parameter constraints with one message form.

"The 'k' parameter of KDeclines must be an int >= 1. Got 0 instead."
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any


class InvalidParameterError(ValueError):
    """A constructor or config received a value outside its declared constraint."""


def _fail(owner: str, name: str, expected: str, value: Any) -> InvalidParameterError:
    return InvalidParameterError(
        f"The {name!r} parameter of {owner} must be {expected}. Got {value!r} instead."
    )


def check_int(owner: str, name: str, value: Any, *, min_value: int | None = None) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if ok and min_value is not None and value < min_value:
        ok = False
    if not ok:
        bound = f" >= {min_value}" if min_value is not None else ""
        raise _fail(owner, name, f"an int{bound}", value)


def check_float(
    owner: str,
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = ok and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        parts = []
        if low is not None:
            parts.append(f"{'>' if low_open else '>='} {low}")
        if high is not None:
            parts.append(f"{'<' if high_open else '<='} {high}")
        bound = " " + " and ".join(parts) if parts else ""
        raise _fail(owner, name, f"a finite number{bound}", value)


def check_choice(owner: str, name: str, value: Any, choices: Collection[str]) -> None:
    if value not in choices:
        options = ", ".join(repr(c) for c in sorted(choices))
        raise _fail(owner, name, f"one of {options}", value)
