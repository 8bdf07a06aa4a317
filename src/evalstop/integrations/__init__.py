"""EvalStop where training already runs: HF Trainer/TRL, Ray Tune and Optuna.

Each adapter lives in its own module and imports its library only when used, so importing this
package stays light::

    from evalstop.integrations import EvalStopCallback   # needs pip install -e '.[hf]'
    from evalstop.integrations import EvalStopStopper, EvalStopScheduler   # pip install -e '.[tune]'
    from evalstop.integrations import best_checkpoint_config               # pip install -e '.[tune]'
    from evalstop.integrations import EvalStopPruner     # pip install -e '.[optuna]'
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "EvalStopCallback": ".hf",
    "EvalStopStopper": ".ray_tune",
    "EvalStopScheduler": ".ray_tune",
    "EvalStopPruner": ".optuna",
    "best_checkpoint_config": ".ray_tune",
    "RemoteJob": "._remote",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
