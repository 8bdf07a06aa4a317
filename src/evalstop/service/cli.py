"""``evalstop serve``: run the HTTP API and the outbox worker in one process.

The admin token is read from ``EVALSTOP_ADMIN_TOKEN`` or from the file named by
``EVALSTOP_ADMIN_TOKEN_FILE`` only (a command-line flag would show in ``ps``); every other setting
may also come from ``EVALSTOP_*`` variables.

SIGTERM (a container stop, a pod deletion) drains: the server stops accepting connections, waits
up to ``GRACEFUL_S`` for requests in flight, then stops the outbox worker and hands its leases
back (see ``app.create_app``). Before the server is up, SIGTERM exits at once (nothing is in
flight). ``--migrate-only`` migrates the schema and exits: the one-off job of a deployment whose
replicas run with ``EVALSTOP_MIGRATE_ON_START=false``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
from typing import Any

#: Seconds a SIGTERM waits for requests in flight before the worker and the database close.
GRACEFUL_S = 5
#: Exit status of a bad configuration or a database at another schema revision.
EXIT_CONFIG = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="sqlite:///PATH (default sqlite:///evalstop.db) or "
                        "postgresql://USER@HOST/DB; default from EVALSTOP_DATABASE_URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--no-worker", action="store_true", help="serve the API only; deliver no stops")
    parser.add_argument("--access-log", action="store_true", help="log every request (off by default)")
    parser.add_argument("--pull-config", metavar="PATH",
                        help="TOML file of pollers (MLflow, TensorBoard, trainer_state) run in the service")
    parser.add_argument("--migrate-only", action="store_true",
                        help="bring the database schema to this release's head, then exit")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from .app import create_app
    from .pulling import PullConfigError
    from .settings import ServiceSettings
    from .store import open_store
    from .store.migrate import SchemaNotCurrent

    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # uvicorn installs its draining handler later
    overrides: dict[str, Any] = {}
    if args.database_url:
        overrides["database_url"] = args.database_url
    if args.no_worker:
        overrides["run_worker"] = False
    if args.pull_config:
        overrides["pull_config"] = args.pull_config
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = ServiceSettings(**overrides)
    except ValidationError as exc:
        print(f"evalstop serve: {_first_error(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    if args.migrate_only:
        open_store(settings.database_url, synchronous=settings.sqlite_synchronous).dispose()
        logging.getLogger("evalstop.service").info("schema migrated to this release's head")
        return 0
    if settings.admin_token is None:
        logging.getLogger("evalstop.service").warning(
            "neither EVALSTOP_ADMIN_TOKEN nor EVALSTOP_ADMIN_TOKEN_FILE is set: operator routes "
            "(create tenants) are disabled")
    try:
        app = create_app(settings)
    except (PullConfigError, SchemaNotCurrent) as exc:
        print(f"evalstop serve: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # The app's ~80k long-lived objects (FastAPI, pydantic, SQLAlchemy) made every full garbage
    # collection a ~25 ms pause in the middle of requests (the p99/max latency of the load
    # benchmark); frozen, they are never scanned again. Objects made later are collected as usual.
    gc.collect()
    gc.freeze()
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            access_log=args.access_log, timeout_graceful_shutdown=GRACEFUL_S)
    # uvicorn restores the handler it found and raises the signal again after draining; by then
    # the shutdown was clean, so that second delivery must not turn exit status 0 into 143
    signal.signal(signal.SIGTERM, _drained)
    uvicorn.Server(config).run()
    return 0


def _drained(_signum: int, _frame: Any) -> None:
    """SIGTERM after uvicorn's own handler is gone: the server has drained; nothing left to do."""


def _exit_on_sigterm(_signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signal.SIGTERM)


def _first_error(exc: Any) -> str:
    """One line naming the setting and the problem (never the value: it may be a secret)."""
    err = exc.errors()[0]
    msg = str(err["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {msg}" if where else msg
