"""Hugging Face ``trainer_state.json`` (:class:`~evalstop.logs.TrainerStateReader`), one per job."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from evalstop.logs import TrainerStateReader
from evalstop.service.pull._base import Cursor, ReaderPoller, Sink


class TrainerStatePoller(ReaderPoller):
    """``paths``: job key -> a ``trainer_state.json`` or its ``output_dir``; ``metric`` as the
    Trainer logs it (a bare ``accuracy`` also matches ``eval_accuracy``). An eval at step N gets
    ``output_dir/checkpoint-N`` as its checkpoint when that directory exists."""

    kind = "trainer_state"

    def __init__(self, sink: Sink, *, paths: Mapping[str, str | Path], metric: str,
                 cursor: Cursor | None = None) -> None:
        self.paths = {k: Path(v) for k, v in paths.items()}
        self.metric = metric
        super().__init__(sink, {k: TrainerStateReader(v, metric) for k, v in self.paths.items()}, cursor)
