"""TensorBoard event directories: one log dir per job, one scalar tag as the score."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalstop.service.pull._base import Cursor, Poller, ScoreRecord, Sink
from evalstop.service.pull._mlflow import checkpoint_for

log = logging.getLogger("evalstop.service.pull.tensorboard")


class TensorBoardPoller(Poller):
    """Reads ``tag`` from every job's log dir (job key -> directory) with TensorBoard's own
    ``EventAccumulator``, kept per job so each poll reads only the new events.

    Both scalar forms are read: ``simple_value`` (PyTorch ``SummaryWriter``, TF1) and the
    tensor form of TF2 ``tf.summary.scalar``. ``checkpoint_template`` may use ``{logdir}``,
    ``{step}``.
    """

    kind = "tensorboard"

    def __init__(self, sink: Sink, *, logdirs: Mapping[str, str | Path], tag: str,
                 checkpoint_template: str | None = None, cursor: Cursor | None = None) -> None:
        super().__init__(sink, cursor)
        self.logdirs = {k: Path(v) for k, v in logdirs.items()}
        self.tag, self.checkpoint_template = tag, checkpoint_template
        self._accumulators: dict[str, Any] = {}

    def _accumulator(self, job_key: str) -> Any:
        if job_key not in self._accumulators:
            try:
                from tensorboard.backend.event_processing import event_accumulator as ea
            except ImportError as exc:  # pragma: no cover - depends on the install
                message = "the TensorBoard poller needs tensorboard: pip install -e '.[pull]'"
                raise ImportError(message) from exc
            self._accumulators[job_key] = ea.EventAccumulator(
                str(self.logdirs[job_key]), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
        return self._accumulators[job_key]

    def fetch(self) -> Mapping[str, Sequence[ScoreRecord]]:
        out: dict[str, list[ScoreRecord]] = {}
        for job_key, logdir in self.logdirs.items():
            if not logdir.is_dir():
                log.info("job %s: no TensorBoard log dir %s yet", job_key, logdir)
                continue
            acc = self._accumulator(job_key)
            acc.Reload()
            out[job_key] = [
                ScoreRecord(int(step), value, self.tag,
                            checkpoint_for(self.checkpoint_template, logdir=logdir, step=step), wall_time)
                for wall_time, step, value in self._events(acc)
            ]
        return out

    def _events(self, acc: Any) -> list[tuple[float, int, float]]:
        tags = acc.Tags()
        if self.tag in tags.get("scalars", []):
            return [(e.wall_time, e.step, float(e.value)) for e in acc.Scalars(self.tag)]
        if self.tag in tags.get("tensors", []):
            from tensorboard.util import tensor_util

            return [(e.wall_time, e.step, float(tensor_util.make_ndarray(e.tensor_proto).item()))
                    for e in acc.Tensors(self.tag)]
        return []
