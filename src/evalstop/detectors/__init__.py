"""Stopping rules. Each is a frozen dataclass of parameters with one ``evaluate`` method."""

from ._base import Decision, Detector, Eval, Verdict
from ._fixed_progress import FixedProgress
from ._kdeclines import KDeclines
from ._loss_plateau import LossPlateau
from ._never import NeverStop
from ._slaq import SlaqLoss
from ._spec import DEFAULT_SPEC, REGISTRY, format_spec, parse_spec

__all__ = [
    "DEFAULT_SPEC",
    "REGISTRY",
    "Decision",
    "Detector",
    "Eval",
    "FixedProgress",
    "KDeclines",
    "LossPlateau",
    "NeverStop",
    "SlaqLoss",
    "Verdict",
    "format_spec",
    "parse_spec",
]
