"""``evalstop serve``: run the HTTP API and the outbox worker in one process.

The admin token is read from ``EVALSTOP_ADMIN_TOKEN`` only (a command-line flag would show in
``ps``); every other setting may also come from ``EVALSTOP_*`` variables.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", help="sqlite:///PATH (default sqlite:///evalstop.db) or "
                        "postgresql://USER@HOST/DB; default from EVALSTOP_DATABASE_URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--no-worker", action="store_true", help="serve the API only; deliver no stops")
    parser.add_argument("--access-log", action="store_true", help="log every request (off by default)")
    parser.add_argument("--pull-config", metavar="PATH",
                        help="TOML file of pollers (MLflow, TensorBoard, trainer_state) run in the service")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app
    from .pulling import PullConfigError
    from .settings import ServiceSettings

    overrides: dict[str, Any] = {}
    if args.database_url:
        overrides["database_url"] = args.database_url
    if args.no_worker:
        overrides["run_worker"] = False
    if args.pull_config:
        overrides["pull_config"] = args.pull_config
    settings = ServiceSettings(**overrides)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.admin_token is None:
        logging.getLogger("evalstop.service").warning(
            "EVALSTOP_ADMIN_TOKEN is not set: operator routes (create tenants) are disabled")
    try:
        app = create_app(settings)
    except PullConfigError as exc:
        print(f"evalstop serve: {exc}", file=sys.stderr)
        return 2
    # The app's ~80k long-lived objects (FastAPI, pydantic, SQLAlchemy) made every full garbage
    # collection a ~25 ms pause in the middle of requests (the p99/max latency of the load
    # benchmark); frozen, they are never scanned again. Objects made later are collected as usual.
    gc.collect()
    gc.freeze()
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            access_log=args.access_log, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run()
    return 0
