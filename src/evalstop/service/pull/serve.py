"""Pull ingest inside ``evalstop serve``: the pollers of a ``--pull-config`` TOML file, run in a
background thread, feed :func:`~evalstop.service.ingest.ingest_scores` as the operator.

One ``[[poller]]`` table names one service job (``job_id``), a ``kind`` and that kind's keys; the
job's source is ``path`` (trainer_state: the ``trainer_state.json`` or its ``output_dir``),
``logdir`` (tensorboard) or ``run_id`` (mlflow). Every other key goes to
:func:`~evalstop.service.pull.make_poller` unchanged, so an unknown or missing key is reported
by the poller itself. Scores go to the job's watched metric (``ScoreIn.metric=None``): the
poller's ``metric``/``tag`` only says what to read from the source.

Sink contract (see :data:`~evalstop.service.pull.Sink`): returning marks the records delivered
(the cursor moves on), raising keeps them for the next poll. So:

- unknown job (``NotFound``): raise -- the job may be registered after the server started;
  its scores wait in the source and are sent once it exists;
- a refused batch (``InvalidInput``/``Conflict``, e.g. a step that changed value or came out of
  order): retried one score at a time, each refused score is logged and dropped, the rest are
  stored; then return, so one bad record never wedges the poller;
- anything else (database busy or down): raise, the batch is retried on the next poll.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalstop._validation import InvalidParameterError, check_choice, check_float

from ..background import DaemonLoop
from ..errors import Conflict, InvalidInput
from ..ingest import ingest_scores
from ..leader import Leadership
from ..score import ScoreIn
from ..store import Store, sqlite_file
from . import POLLERS, Cursor, Poller, ScoreRecord, make_poller, run_pollers
from .schema import PULL

log = logging.getLogger("evalstop.service.pull.serve")

#: kind -> (the one-job source key in the config, the poller's mapping argument it becomes)
SOURCE_KEYS: dict[str, tuple[str, str]] = {
    "trainer_state": ("path", "paths"), "tensorboard": ("logdir", "logdirs"), "mlflow": ("run_id", "runs"),
}
TOP_KEYS = tuple(PULL.names())


class PullConfigError(InvalidParameterError):
    """A ``--pull-config`` file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class PollerSpec:
    """One ``[[poller]]`` table: the poller's keyword arguments, without the sink and cursor."""

    job_id: str
    kind: str
    options: dict[str, Any]

    @property
    def cursor_name(self) -> str:
        """A file name that is stable for the same table and never clashes with another's."""
        raw = json.dumps([self.job_id, self.kind, self.options], sort_keys=True, default=str)
        return f"{self.kind}-{hashlib.sha256(raw.encode()).hexdigest()[:16]}.json"


@dataclass(frozen=True)
class PullConfig:
    pollers: list[PollerSpec]
    interval_s: float = 10.0
    cursor_dir: Path | None = None


def load_pull_config(path: str | Path) -> PullConfig:
    """Read and validate the file: every poller is built once (with no cursor) to check its keys."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PullConfigError(f"pull config {str(path)!r}: {exc}") from None
    try:
        return _parse(raw)
    except InvalidParameterError as exc:
        raise PullConfigError(f"pull config {str(path)!r}: {exc}") from None


def _parse(raw: dict[str, Any]) -> PullConfig:
    if not raw.get("poller"):
        raise InvalidParameterError("no [[poller]] tables: nothing to poll.")
    PULL.check(raw, InvalidParameterError, "top level")
    interval_s = raw.get("interval_s", 10.0)
    check_float("pull config", "interval_s", interval_s, low=0, low_open=True)
    tables = raw.get("poller", [])
    if not isinstance(tables, list) or not tables:
        raise InvalidParameterError("no [[poller]] tables: nothing to poll.")
    specs = [_spec(i, table) for i, table in enumerate(tables)]
    cursor_dir = raw.get("cursor_dir")
    if cursor_dir is not None and not isinstance(cursor_dir, str):
        raise InvalidParameterError(f"cursor_dir must be a directory path. Got {cursor_dir!r} instead.")
    return PullConfig(specs, float(interval_s), Path(cursor_dir) if cursor_dir is not None else None)


def _spec(index: int, table: dict[str, Any]) -> PollerSpec:
    where = f"poller[{index}]"
    if not isinstance(table, dict):
        raise InvalidParameterError(f"{where} must be a [[poller]] table. Got {table!r} instead.")
    options = dict(table)
    job_id, kind = options.pop("job_id", None), options.pop("kind", None)
    if not isinstance(job_id, str) or not job_id:
        raise InvalidParameterError(f"{where}: missing required key 'job_id' (the service job id).")
    check_choice(where, "kind", kind, POLLERS)
    source, mapping = SOURCE_KEYS[kind]
    if mapping in options or "cursor" in options:
        bad = mapping if mapping in options else "cursor"
        raise InvalidParameterError(
            f"{where}: unknown key {bad!r}; one [[poller]] is one job, named by {source!r}.")
    if source not in options:
        raise InvalidParameterError(f"{where}: missing required key {source!r} for kind {kind!r}.")
    options[mapping] = {job_id: options.pop(source)}
    spec = PollerSpec(job_id, kind, options)
    try:
        make_poller(kind, _no_sink, **{k: v for k, v in options.items() if k != "cursor_path"})
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{where}: {exc}") from None
    return spec


def _no_sink(_job_id: str, _records: Sequence[ScoreRecord]) -> None:  # pragma: no cover - never polled
    raise AssertionError("a validation poller is never polled")


def default_cursor_dir(database_url: str) -> Path | None:
    """``<database directory>/evalstop-pull`` for a SQLite file; None for anything else."""
    path = sqlite_file(database_url)
    return None if path is None else path.resolve().parent / "evalstop-pull"


class IngestSink:
    """The pollers' sink: records -> ``ScoreIn`` -> ``ingest_scores(tenant=None)`` (see the module
    docstring for which errors are raised and which are logged and dropped)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __call__(self, job_id: str, records: Sequence[ScoreRecord]) -> None:
        items = [item for r in records if (item := _score(job_id, r)) is not None]
        size = self.store.limits.max_batch
        for start in range(0, len(items), size):  # a long history is sent in batches the store takes
            batch = items[start:start + size]
            try:
                ingest_scores(self.store, job_id, None, batch)
            except (InvalidInput, Conflict):
                self._one_by_one(job_id, batch)

    def _one_by_one(self, job_id: str, batch: Sequence[ScoreIn]) -> None:
        for item in batch:
            try:
                ingest_scores(self.store, job_id, None, [item])
            except (InvalidInput, Conflict) as exc:
                log.warning("job %s: pulled score at step %d refused, dropped: %s", job_id, item.step, exc)


def _score(job_id: str, record: ScoreRecord) -> ScoreIn | None:
    """The record as a score, or None (logged, dropped) when a field is invalid (a NaN value)."""
    try:
        return ScoreIn(step=record.step, value=record.value, checkpoint_uri=record.checkpoint_uri,
                       ts=record.ts)
    except ValidationError as exc:
        log.warning("job %s: pulled score at step %r refused, dropped: %s", job_id, record.step,
                    exc.errors()[0]["msg"])
        return None


@dataclass
class PullLoop(DaemonLoop):
    """Owns the pollers; ``start``/``stop`` run them every ``interval_s`` in one daemon thread."""

    pollers: list[Poller]
    interval_s: float
    leadership: Leadership | None = None
    thread_name = "evalstop-pull"

    @classmethod
    def build(cls, config: PullConfig, store: Store, cursor_dir: Path | None) -> PullLoop:
        """Pollers with persistent cursors under ``config.cursor_dir`` or ``cursor_dir``; with
        neither, in-memory cursors (a restart re-sends; ingest is idempotent, so only work is lost)."""
        where = config.cursor_dir or cursor_dir
        if where is None:
            log.warning("pull ingest: no cursor_dir and no SQLite file; cursors are kept in memory")
        sink = IngestSink(store)
        pollers = []
        for spec in config.pollers:
            options = dict(spec.options)
            path = options.pop("cursor_path", None) or (where / spec.cursor_name if where else None)
            pollers.append(make_poller(spec.kind, sink, cursor=Cursor(path), **options))
        return cls(pollers, config.interval_s, Leadership(store))

    def _run(self, stop: threading.Event) -> None:
        """Poll only while this replica leads (see :mod:`.leader`); the others wait their turn."""
        if self.leadership is None:
            run_pollers(self.pollers, self.interval_s, stop)
            return
        with self.leadership as lead:
            while not stop.is_set():
                if lead.held():
                    for poller in self.pollers:
                        try:
                            poller.poll()
                        except Exception:  # a broken source is logged, the loop goes on
                            log.exception("poller %s failed", poller.kind)
                stop.wait(self.interval_s)
