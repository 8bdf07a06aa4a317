"""Argparse types for integer options: one message form, naming the allowed range.

argparse puts the option's name in front, so a bad value reads
``evalstop reproduce: error: argument --seeds: must be an int from 2 to 1000. Got 1 instead.``
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["int_in_range"]


def int_in_range(low: int, high: int | None = None, why: str = "") -> Callable[[str], int]:
    """An argparse type: an int >= ``low`` (and <= ``high`` when given). ``why`` says why the
    range is what it is, in the message."""
    allowed = f"an int >= {low}" if high is None else f"an int from {low} to {high}"
    reason = f" ({why})" if why else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {allowed}. Got {text!r} instead.") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {allowed}{reason}. Got {value} instead.")
        return value

    return parse
