"""evalstop: stop reward-hacked fine-tuning jobs, free their GPUs, keep their best checkpoint."""

from .detectors import DEFAULT_SPEC, Decision, Detector, Eval, KDeclines, Monitor, NeverStop, Verdict

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SPEC", "Decision", "Detector", "Eval", "KDeclines", "Monitor", "NeverStop", "Verdict",
    "__version__",
]
