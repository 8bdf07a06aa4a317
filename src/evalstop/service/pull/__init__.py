"""Pull ingest: poll MLflow, TensorBoard event dirs and HF ``trainer_state.json`` for eval scores.

Each poller hands new :class:`ScoreRecord` s to a ``Sink(job_key, records)``; the service wires
the sink to its ingest. The reading is :mod:`evalstop.logs`' (shared with ``evalstop watch``);
this package adds cursors, sinks and the polling loop.
"""

from __future__ import annotations

from typing import Any

from evalstop._validation import InvalidParameterError, check_choice
from evalstop.logs import ScoreRecord
from evalstop.service.pull._base import Cursor, Poller, PollStats, ReaderPoller, Sink, run_pollers
from evalstop.service.pull._mlflow import MlflowPoller
from evalstop.service.pull._tensorboard import TensorBoardPoller
from evalstop.service.pull._trainer_state import TrainerStatePoller

__all__ = [
    "POLLERS", "Cursor", "MlflowPoller", "PollStats", "Poller", "ReaderPoller", "ScoreRecord", "Sink",
    "TensorBoardPoller", "TrainerStatePoller", "make_poller", "run_pollers",
]

POLLERS: dict[str, type[Poller]] = {
    "mlflow": MlflowPoller, "tensorboard": TensorBoardPoller, "trainer_state": TrainerStatePoller,
}


def make_poller(kind: str, sink: Sink, **config: Any) -> Poller:
    """``make_poller("mlflow", sink, tracking_uri=..., runs={...}, metric="eval_acc")``.

    ``cursor_path`` (a JSON file) makes the cursor survive restarts; a config file can thus
    describe a poller completely: ``{"kind": "trainer_state", "paths": {...}, "metric": ...}``.
    """
    check_choice("make_poller", "kind", kind, POLLERS)
    if "cursor_path" in config:
        config["cursor"] = Cursor(config.pop("cursor_path"))
    try:
        return POLLERS[kind](sink, **config)
    except TypeError as exc:  # a missing or unknown key in the poller's config
        raise InvalidParameterError(f"The {kind} poller's config is invalid: {exc}") from None
