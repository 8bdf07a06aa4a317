"""evalstop: stop reward-hacked fine-tuning jobs, free their GPUs, keep their best checkpoint."""

from .detectors import Decision, Detector, Eval, KDeclines, NeverStop, Verdict

__version__ = "0.1.0"

__all__ = ["Decision", "Detector", "Eval", "KDeclines", "NeverStop", "Verdict", "__version__"]
