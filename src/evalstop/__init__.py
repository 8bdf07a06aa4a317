"""evalstop: stop reward-hacked fine-tuning jobs, free their GPUs, keep their best checkpoint."""

from importlib.metadata import PackageNotFoundError, version

from .detectors import DEFAULT_SPEC, Decision, Detector, Eval, KDeclines, Monitor, NeverStop, Verdict

try:  # the version is written once, in pyproject.toml
    __version__ = version("evalstop")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "DEFAULT_SPEC", "Decision", "Detector", "Eval", "KDeclines", "Monitor", "NeverStop", "Verdict",
    "__version__",
]
