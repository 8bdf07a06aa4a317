"""What a tenant's stopping rule may cost: its parameters against the operator's maxima.

A rule names the constructor parameters that size its state or its work per eval
(``Detector.size_params``: mann-kendall's ``max_window``, slaq's ``window``). The state is
rewritten on every score, so an unbounded window lets one tenant's posts slow every other
tenant's commits; the rate limit counts scores, not the work behind each. Each such parameter
must be at most ``rule_max_window`` (a service setting), else the registration is 422 naming
the parameter, its value and the limit.
"""

from __future__ import annotations

from ..detectors import Detector
from .errors import InvalidInput


def check_rule_cost(detector: Detector, max_window: int) -> None:
    """Raise InvalidInput naming the first parameter of ``detector`` over ``max_window``."""
    for param in detector.size_params:
        value = getattr(detector, param)
        if value > max_window:
            raise InvalidInput(
                f"detector: {detector.name} {param}={value} is over the service's limit of {max_window} "
                f"(setting rule_max_window, EVALSTOP_RULE_MAX_WINDOW).")
