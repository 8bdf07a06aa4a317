"""Reusable test batteries and fixtures for evalstop extensions.

``check_detector(detector, histories)`` is the contract every stopping rule must pass; run it
over your own detector in your test suite. Importing this package needs neither pytest nor
hypothesis.
"""

from .detector_contract import (
    CORRUPTIONS,
    FIXED_HISTORIES,
    ContractError,
    check_best,
    check_corruption,
    check_detector,
    check_frozen,
    check_history,
    check_incremental,
    check_prefixes,
    check_state_bounded,
    long_noisy_history,
)

__all__ = [
    "CORRUPTIONS",
    "FIXED_HISTORIES",
    "ContractError",
    "check_best",
    "check_corruption",
    "check_detector",
    "check_frozen",
    "check_history",
    "check_incremental",
    "check_prefixes",
    "check_state_bounded",
    "long_noisy_history",
]
