"""MLflow: each job is a run; its eval metric's history is the score series."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalstop.logs import MlflowClientReader, ScoreRecord
from evalstop.service.pull._base import Cursor, ReaderPoller, Sink


def checkpoint_for(template: str | None, **fields: Any) -> str | None:
    """``template`` formatted with the record's fields (``{run_id}``, ``{step}``...), or None."""
    return template.format(**fields) if template else None


class MlflowPoller(ReaderPoller):
    """Polls ``metric`` of every run in ``runs`` (job key -> MLflow run id).

    ``checkpoint_template`` (e.g. ``"runs:/{run_id}/checkpoints/step-{step}"``) names each
    eval's checkpoint. Works with any tracking URI MLflow accepts (``sqlite:///...``, a server).
    """

    kind = "mlflow"

    def __init__(self, sink: Sink, *, tracking_uri: str, runs: Mapping[str, str], metric: str,
                 checkpoint_template: str | None = None, cursor: Cursor | None = None) -> None:
        readers = {k: MlflowClientReader(tracking_uri, run_id, metric) for k, run_id in runs.items()}
        super().__init__(sink, readers, cursor)
        self.tracking_uri, self.runs, self.metric = tracking_uri, dict(runs), metric
        self.checkpoint_template = checkpoint_template

    def checkpoint(self, job_key: str, record: ScoreRecord) -> str | None:
        return checkpoint_for(self.checkpoint_template, run_id=self.runs[job_key], step=record.step)
