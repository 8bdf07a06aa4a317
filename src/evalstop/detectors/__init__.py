"""Stopping rules. Each is a frozen dataclass of parameters with an incremental decision
(``start``/``update``, folded by ``evaluate``); ``Monitor`` holds one job's state."""

from ._base import Decision, Detector, Eval, RuleEvidence, Verdict
from ._cadence import DEFAULT_CADENCE, Adaptive, CadencePolicy, Every, NextEval, format_cadence, parse_cadence
from ._confirm import Confirm, parse_confirm
from ._cusum import Cusum
from ._fixed_progress import FixedProgress
from ._kdeclines import KDeclines
from ._loss_plateau import LossPlateau
from ._mann_kendall import MannKendall
from ._monitor import Monitor
from ._never import NeverStop
from ._noise import ItemEval
from ._noise_aware import NoiseAware
from ._paired import Paired
from ._patience import Patience
from ._policy import STOP, Correction, OnDetect
from ._rewind import Rewind
from ._slaq import SlaqLoss
from ._spec import DEFAULT_SPEC, REGISTRY, detector_for, format_spec, parse_spec
from ._watch import CadenceWalk, watch

__all__ = [
    "DEFAULT_CADENCE",
    "DEFAULT_SPEC",
    "REGISTRY",
    "STOP",
    "Adaptive",
    "CadencePolicy",
    "CadenceWalk",
    "Confirm",
    "Correction",
    "Cusum",
    "Decision",
    "Detector",
    "Eval",
    "Every",
    "FixedProgress",
    "ItemEval",
    "KDeclines",
    "LossPlateau",
    "MannKendall",
    "Monitor",
    "NeverStop",
    "NextEval",
    "NoiseAware",
    "OnDetect",
    "Paired",
    "Patience",
    "Rewind",
    "RuleEvidence",
    "SlaqLoss",
    "Verdict",
    "detector_for",
    "format_cadence",

    "format_spec",
    "parse_cadence",
    "parse_confirm",
    "parse_spec",
    "watch",
]
