"""TensorBoard event directories: one log dir per job, one scalar tag as the score."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from evalstop.logs import ScoreRecord, TensorBoardReader
from evalstop.service.pull._base import Cursor, ReaderPoller, Sink
from evalstop.service.pull._mlflow import checkpoint_for


class TensorBoardPoller(ReaderPoller):
    """Reads ``tag`` from every job's log dir (job key -> directory) with
    :class:`~evalstop.logs.TensorBoardReader`: each poll reads only the new events.

    Both scalar forms are read: ``simple_value`` (PyTorch ``SummaryWriter``, TF1) and the
    tensor form of TF2 ``tf.summary.scalar``. ``checkpoint_template`` may use ``{logdir}``,
    ``{step}``.
    """

    kind = "tensorboard"

    def __init__(self, sink: Sink, *, logdirs: Mapping[str, str | Path], tag: str,
                 checkpoint_template: str | None = None, cursor: Cursor | None = None) -> None:
        self.logdirs = {k: Path(v) for k, v in logdirs.items()}
        super().__init__(sink, {k: TensorBoardReader(v, tag) for k, v in self.logdirs.items()}, cursor)
        self.tag, self.checkpoint_template = tag, checkpoint_template

    def checkpoint(self, job_key: str, record: ScoreRecord) -> str | None:
        return checkpoint_for(self.checkpoint_template, logdir=self.logdirs[job_key], step=record.step)
