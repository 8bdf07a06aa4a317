"""Feed a dense eval history to a monitor through its cadence policy.

A dense history lists every eval the job could have run (one per opportunity). ``watch`` folds
into the monitor only the evals its policy asks for, in order, and stops at the first stop:
what the job would have done had it followed the hints. ``evalstop replay --cadence`` does the
same row by row.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._base import Eval
from ._monitor import Monitor


def watch(monitor: Monitor, evals: Sequence[Eval]) -> list[int]:
    """Observe the evals of ``evals`` that ``monitor``'s policy asks for; return their indices."""
    used: list[int] = []
    wanted = monitor.next_eval().after - 1
    while wanted < len(evals) and not monitor.fired:
        monitor.observe(evals[wanted])
        used.append(wanted)
        wanted += monitor.next_eval().after
    return used
