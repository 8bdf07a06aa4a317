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


#: The most a count of evals may be (a rule's ``k``, ``patience``, a window): far beyond any real
#: job, and small enough that every sum and float conversion of it stays exact.
MAX_COUNT = 1_000_000
#: The most a parameter in score units may be (a rule's ``min_delta``, ``sigma``): a product of
#: it with any other bounded parameter (at most 1e6) stays finite.
MAX_SCALE = 1e100
#: The smallest positive share of training progress a rule accepts (``hold``, ``per``): below it
#: a share cannot be told from 0 in the progress a job reports.
MIN_SHARE = 1e-6


def check_int(
    owner: str, name: str, value: Any, *, min_value: int | None = None, max_value: int | None = None
) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if ok and min_value is not None and value < min_value:
        ok = False
    if ok and max_value is not None and value > max_value:
        ok = False
    if not ok:
        parts = [] if min_value is None else [f">= {min_value}"]
        parts += [] if max_value is None else [f"<= {max_value}"]
        bound = " " + " and ".join(parts) if parts else ""
        raise _fail(owner, name, f"an int{bound}", _shown(value))


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
    try:
        ok = ok and math.isfinite(value)
    except OverflowError:  # an int too large for a float
        ok = False
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
        raise _fail(owner, name, f"a finite number{bound}", _shown(value))


def check_share(owner: str, name: str, value: Any) -> None:
    """A share of training progress that is off at 0: 0, or in [MIN_SHARE, 1]."""
    check_float(owner, name, value, low=0.0, high=1.0)
    if 0.0 < value < MIN_SHARE:
        raise _fail(owner, name, f"0 (off) or a finite number >= {MIN_SHARE} and <= 1.0", value)


def _shown(value: Any) -> Any:
    """``value`` as an error message quotes it: a huge int by its size, not its 4,000 digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return _Digits(value)
    return value


class _Digits:
    def __init__(self, value: int) -> None:
        digits = int(abs(value).bit_length() * math.log10(2)) + 1  # str() refuses over 4,300 digits
        self.text = f"{'-' if value < 0 else ''}an int of about {digits} digits"

    def __repr__(self) -> str:
        return self.text


def check_choice(owner: str, name: str, value: Any, choices: Collection[str]) -> None:
    if value not in choices:
        options = ", ".join(repr(c) for c in sorted(choices))
        raise _fail(owner, name, f"one of {options}", value)
