"""MLflow: a run's metric history, from the file store directly or through MLflow's client.

``MlflowFileReader`` needs no mlflow package: the file store (``mlruns/``, MLflow's default
``file:`` tracking URI) keeps each metric of a run in ``<run>/metrics/<key>`` (a key with ``/``
is a subdirectory), one ``<timestamp ms> <value> <step>`` line per logged value, appended, so
the reader keeps a byte offset per file. ``MlflowClientReader`` asks any tracking URI MLflow
accepts (``sqlite:///...``, a server) through ``MlflowClient`` (the 'pull' extra).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ._record import LogReader, ScoreRecord, read_from, whole_lines

log = logging.getLogger("evalstop.logs.mlflow")
RUN_MARK = "meta.yaml"


class MlflowFileReader(LogReader):
    """``metric`` of one run of an MLflow file store. ``path`` is the run's directory
    (``mlruns/<experiment id>/<run id>``), or a store root, an experiment's directory: then the
    run is the newest one there (by its ``meta.yaml`` time) once one exists."""

    def __init__(self, path: str | Path, metric: str) -> None:
        self.path, self.metric = Path(path), metric
        self.run_dir: Path | None = None
        self._offset = 0

    @property
    def location(self) -> str:
        return str(self.run_dir or self.path)

    def exists(self) -> bool:
        return self.path.is_dir()

    def _run(self) -> Path | None:
        if self.run_dir is None:
            if (self.path / RUN_MARK).is_file() and (self.path / "metrics").is_dir():
                self.run_dir = self.path
            else:
                marks = [*self.path.glob(f"*/{RUN_MARK}"), *self.path.glob(f"*/*/{RUN_MARK}")]
                runs = [m.parent for m in marks if (m.parent / "metrics").is_dir()]
                self.run_dir = max(runs, key=lambda r: (r / RUN_MARK).stat().st_mtime, default=None)
        return self.run_dir

    def names(self) -> list[str]:
        run = self._run()
        if run is None:
            return []
        metrics = run / "metrics"
        return sorted(str(p.relative_to(metrics)) for p in metrics.rglob("*") if p.is_file())

    def read(self) -> list[ScoreRecord]:
        run = self._run()
        if run is None:
            return []
        path = run / "metrics" / self.metric
        complete = whole_lines(read_from(path, self._offset))
        self._offset += len(complete)
        out = []
        for line in complete.decode("utf-8", "replace").splitlines():
            parts = line.split()
            try:
                ts, value, step = int(parts[0]), float(parts[1]), int(parts[2]) if len(parts) > 2 else 0
            except (IndexError, ValueError):
                log.warning("%s: a line that is not '<timestamp> <value> <step>' was skipped: %r", path, line)
                continue
            out.append(ScoreRecord(step, value, self.metric, None, ts / 1000.0))
        return out


class MlflowClientReader(LogReader):
    """``metric`` of run ``run_id`` through ``MlflowClient(tracking_uri)``; each read asks for the
    metric's history and returns the entries not returned before. A run MLflow does not know
    reads as empty (logged)."""

    def __init__(self, tracking_uri: str, run_id: str, metric: str) -> None:
        self.tracking_uri, self.run_id, self.metric = tracking_uri, run_id, metric
        self._client: Any = None
        self._seen: set[tuple[int, int, float]] = set()
        self._names: list[str] = []

    @property
    def location(self) -> str:
        return f"{self.tracking_uri} run {self.run_id}"

    def _mlflow(self) -> Any:
        if self._client is None:
            try:
                from mlflow.tracking import MlflowClient
            except ImportError as exc:  # pragma: no cover - depends on the install
                message = "reading MLflow through its client needs mlflow: pip install -e '.[pull]'"
                raise ImportError(message) from exc
            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def exists(self) -> bool:
        return self._run() is not None

    def _run(self) -> Any:
        from mlflow.exceptions import MlflowException

        try:
            return self._mlflow().get_run(self.run_id)
        except MlflowException:
            return None

    def names(self) -> list[str]:
        run = self._run()
        return sorted(run.data.metrics) if run is not None else []

    def read(self) -> list[ScoreRecord]:
        from mlflow.exceptions import MlflowException

        try:
            history = self._mlflow().get_metric_history(self.run_id, self.metric)
        except MlflowException as exc:
            log.warning("MLflow run %s unreadable: %s", self.run_id, exc)
            return []
        out = []
        for m in history:
            key = (int(m.step), int(m.timestamp), float(m.value))
            if key not in self._seen:
                self._seen.add(key)
                out.append(ScoreRecord(int(m.step), float(m.value), self.metric, None, m.timestamp / 1000.0))
        return out
