"""Read the eval metrics a training run already writes: TensorBoard event files, MLflow, JSON
lines, the HF Trainer's ``trainer_state.json``, W&B run files. Incremental (each read returns
what is new), with no client library needed except for ``MlflowClientReader`` and
``WandbReader`` (the ``wandb`` package's message classes).

Shared by ``evalstop watch`` and the service's pull ingest (``evalstop.service.pull``).
"""

from ._jsonl import JsonlReader
from ._mlflow import MlflowClientReader, MlflowFileReader
from ._record import LogReader, ScoreRecord
from ._tensorboard import TensorBoardReader
from ._trainer_state import STATE_FILE, TrainerStateReader
from ._wandb import WandbReader

__all__ = [
    "STATE_FILE", "JsonlReader", "LogReader", "MlflowClientReader", "MlflowFileReader", "ScoreRecord",
    "TensorBoardReader", "TrainerStateReader", "WandbReader",
]
