"""MLflow: each job is a run; its eval metric's history is the score series."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from evalstop.service.pull._base import Cursor, Poller, ScoreRecord, Sink

log = logging.getLogger("evalstop.service.pull.mlflow")


def checkpoint_for(template: str | None, **fields: Any) -> str | None:
    """``template`` formatted with the record's fields (``{run_id}``, ``{step}``...), or None."""
    return template.format(**fields) if template else None


class MlflowPoller(Poller):
    """Polls ``metric`` of every run in ``runs`` (job key -> MLflow run id).

    ``checkpoint_template`` (e.g. ``"runs:/{run_id}/checkpoints/step-{step}"``) names each
    eval's checkpoint. Works with any tracking URI MLflow accepts (``sqlite:///...``, a server).
    """

    kind = "mlflow"

    def __init__(self, sink: Sink, *, tracking_uri: str, runs: Mapping[str, str], metric: str,
                 checkpoint_template: str | None = None, cursor: Cursor | None = None) -> None:
        super().__init__(sink, cursor)
        self.tracking_uri, self.runs, self.metric = tracking_uri, dict(runs), metric
        self.checkpoint_template = checkpoint_template
        self._client: Any = None

    def _mlflow(self) -> Any:
        if self._client is None:
            try:
                from mlflow.tracking import MlflowClient
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise ImportError("the MLflow poller needs mlflow: pip install -e '.[pull]'") from exc
            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def fetch(self) -> Mapping[str, Sequence[ScoreRecord]]:
        from mlflow.exceptions import MlflowException

        out: dict[str, list[ScoreRecord]] = {}
        for job_key, run_id in self.runs.items():
            try:
                history = self._mlflow().get_metric_history(run_id, self.metric)
            except MlflowException as exc:
                log.warning("job %s: MLflow run %s unreadable: %s", job_key, run_id, exc)
                continue
            out[job_key] = [
                ScoreRecord(int(m.step), float(m.value), self.metric,
                            checkpoint_for(self.checkpoint_template, run_id=run_id, step=m.step),
                            m.timestamp / 1000.0)
                for m in history
            ]
        return out
