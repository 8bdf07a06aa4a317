"""The ``--pull-config`` TOML file's tables, declared with the same machinery as the simulate and
study configs (``evalstop._schema``; JSON Schema in ``docs/schema/pull.json``)."""

from __future__ import annotations

from evalstop._schema import Key, Table

#: Poller kinds (the keys of ``evalstop.service.pull.POLLERS``; a test keeps them in step).
KINDS = ("mlflow", "tensorboard", "trainer_state")

POLLER = Table("[[poller]]", (
    Key("job_id", ("string",), "the service job the scores go to", required=True),
    Key("kind", ("string",), "where the scores are read", enum=KINDS, required=True),
    Key("path", ("string",), "trainer_state: the trainer_state.json file or its output_dir"),
    Key("logdir", ("string",), "tensorboard: the log directory"),
    Key("run_id", ("string",), "mlflow: the run id"),
), "one poller: one job, one source; the other keys are the poller kind's own options", open=True)
PULL = Table("pull config", (
    Key("interval_s", ("number",), "seconds between polls (default 10)"),
    Key("cursor_dir", ("string",), "where cursors are kept (default: beside the SQLite file)"),
    Key("poller", ("array",), "the pollers", table=POLLER, required=True),
), "the TOML file of `evalstop serve --pull-config PATH`")
