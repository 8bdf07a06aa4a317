"""``evalstop serve``: run the HTTP API and the outbox worker in one process.

The admin token is read from ``EVALSTOP_ADMIN_TOKEN`` or from the file named by
``EVALSTOP_ADMIN_TOKEN_FILE`` only (a command-line flag would show in ``ps``); every other setting
may also come from ``EVALSTOP_*`` variables.

SIGTERM (a container stop, a pod deletion) drains: the server stops accepting connections, waits
up to ``GRACEFUL_S`` for requests in flight, then stops the outbox worker and hands its leases
back (see ``app.create_app``). Before the server is up, SIGTERM exits at once (nothing is in
flight). ``--migrate-only`` migrates the schema and exits: the one-off job of a deployment whose
replicas run with ``EVALSTOP_MIGRATE_ON_START=false``. A bad option or setting is
one line naming it, and exit code 2.
"""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import signal
import socket
import sys
import time
from typing import Any

#: Seconds a SIGTERM waits for requests in flight before the worker and the database close.
GRACEFUL_S = 5
#: Exit status of a bad configuration or a database at another schema revision.
EXIT_CONFIG = 2

EPILOG = """settings from the environment (docs/service.md, "Configuration"):
  EVALSTOP_ADMIN_TOKEN      operator token (create tenants); unset: operator routes disabled
  EVALSTOP_ADAPTER_SETTINGS JSON, per stop target, e.g. '{"ray": {"address": "http://HOST:8265"}}'
                            (a target without its settings answers 422 on job registration)
  EVALSTOP_<SETTING>        any other setting of docs/service.md, e.g. EVALSTOP_MAX_BATCH=500"""


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0-65535 (0: any free port, which the start-up log names)."""
    allowed = "a port number 0-65535 (0: any free port)"
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {allowed}. Got {text!r} instead.") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be {allowed}. Got {port} instead.")
    return port


class ListenError(OSError):
    """The service cannot listen on --host/--port; the message is one line naming which."""


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, before anything else starts (the server then serves on
    it, so no other process can take the port in between). ListenError says why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ListenError(f"--host {host}: not an address or a name this machine resolves "
                          f"({getattr(exc, 'strerror', None) or exc})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart reuses its port
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ListenError(_bind_failure(host, port, exc)) from None
    return sock


def _bind_failure(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (f"--port {port}: {host}:{port} is already in use (another server listens there); "
                "choose another --port, or --port 0 for any free one")
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"--host {host}: not an address of this machine, cannot listen on it ({exc.strerror})"
    if exc.errno == errno.EACCES:
        return f"--port {port}: permission denied on {host} (ports below 1024 need privileges)"
    return f"--host {host} --port {port}: cannot listen there: {exc.strerror or exc}"


def seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0. Got {text!r} instead.")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--database-url", help="sqlite:///PATH (default sqlite:///evalstop.db) or "
                        "postgresql://USER@HOST/DB; default from EVALSTOP_DATABASE_URL")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=port_number, default=8000,
                        help="TCP port, 0 for any free one (default: %(default)s)")
    parser.add_argument("--no-worker", action="store_true", help="serve the API only; deliver no stops")
    parser.add_argument("--access-log", action="store_true", help="log every request (off by default)")
    parser.add_argument("--pull-config", metavar="PATH",
                        help="TOML file of pollers (MLflow, TensorBoard, trainer_state) run in the service")
    parser.add_argument("--migrate-only", action="store_true",
                        help="bring the database schema to this release's head, then exit")
    parser.add_argument("--wait-for-schema", type=seconds, metavar="SECONDS",
                        help="wait until the database schema is at this release's head (the migration "
                        "job has run), then exit 0; exit 2 after SECONDS (a replica's init container)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="the service's and uvicorn's log level (default: %(default)s); the database "
                        "migrations log at debug only")
    parser.set_defaults(run=run)


def _one_line(exc: Any) -> str:
    """A pydantic ValidationError as one line: each bad setting (as its option, where it has one)."""
    parts = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        if not name:  # a check across settings (the admin token file): its message names it
            parts.append(msg)
            continue
        option = "--database-url" if name == "database_url" else f"EVALSTOP_{name.upper()}"
        parts.append(f"{option}: {msg}")
    return "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from . import log_redact
    from .app import create_app
    from .pull.serve import PullConfigError
    from .settings import ServiceSettings
    from .store import DatabaseError
    from .store.migrate import SchemaNotCurrent

    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # uvicorn installs its draining handler later
    overrides: dict[str, Any] = {}
    if args.database_url:
        overrides["database_url"] = args.database_url
    if args.no_worker:
        overrides["run_worker"] = False
    if args.pull_config:
        overrides["pull_config"] = args.pull_config
    try:
        settings = ServiceSettings(**overrides)
    except ValidationError as exc:
        print(f"evalstop serve: {_one_line(exc)}", file=sys.stderr)
        return EXIT_CONFIG
    try:  # the port and host first: a taken port is one line, before the database or the app starts
        listener = (None if args.migrate_only or args.wait_for_schema is not None
                    else listen_socket(args.host, args.port))
    except ListenError as exc:
        print(f"evalstop serve: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log_redact.install()  # a database error is logged by class and SQLSTATE, never its values
    if args.log_level != "debug":  # alembic's ~9 INFO lines per start say nothing an operator needs
        logging.getLogger("alembic").setLevel(logging.WARNING)
    if args.migrate_only:  # the migration job: one line when done, or one line saying why not
        return _migrate_only(settings)
    if args.wait_for_schema is not None:
        return _wait_for_schema(settings, args.wait_for_schema)
    if settings.admin_token is None:
        logging.getLogger("evalstop.service").warning(
            "neither EVALSTOP_ADMIN_TOKEN nor EVALSTOP_ADMIN_TOKEN_FILE is set: operator routes "
            "(create tenants) are disabled")
    assert listener is not None
    try:
        app = create_app(settings)
    except (PullConfigError, SchemaNotCurrent) as exc:
        listener.close()
        print(f"evalstop serve: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except DatabaseError as exc:  # the URL was well formed, the database would not open
        listener.close()
        print(f"evalstop serve: {_cannot_open(settings.database_url, exc)}", file=sys.stderr)
        return EXIT_CONFIG
    # The app's ~80k long-lived objects (FastAPI, pydantic, SQLAlchemy) made every full garbage
    # collection a ~25 ms pause in the middle of requests (the p99/max latency of the load
    # benchmark); frozen, they are never scanned again. Objects made later are collected as usual.
    gc.collect()
    gc.freeze()
    config = uvicorn.Config(app, host=args.host, port=listener.getsockname()[1], log_level=args.log_level,
                            access_log=args.access_log, timeout_graceful_shutdown=GRACEFUL_S)
    log_redact.install(logging.getLogger("uvicorn"))  # uvicorn's own handlers, made by its Config
    # uvicorn restores the handler it found and raises the signal again after draining; by then
    # the shutdown was clean, so that second delivery must not turn exit status 0 into 143
    signal.signal(signal.SIGTERM, _drained)
    host, port = listener.getsockname()[:2]  # uvicorn names no address when given the socket
    logging.getLogger("evalstop.service").info(
        "listening on http://%s:%d (Ctrl-C to quit)", f"[{host}]" if ":" in host else host, port)
    uvicorn.Server(config).run(sockets=[listener])
    return 0


def _cannot_open(url: str, exc: BaseException) -> str:
    """Why the database at ``url`` would not open, in one line, its password redacted."""
    from .settings import redact_url

    cause = (str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0]
    return f"cannot open the database {redact_url(url)!r}: {cause}"


def _migrate_only(settings: Any) -> int:
    """Bring the schema to this release's head and exit 0; a database that will not open is one
    line and ``EXIT_CONFIG``, as for ``serve``."""
    from .store import DatabaseError, open_store
    from .store.migrate import head_revision

    try:
        open_store(settings.database_url, synchronous=settings.sqlite_synchronous).dispose()
    except DatabaseError as exc:
        print(f"evalstop serve --migrate-only: {_cannot_open(settings.database_url, exc)}", file=sys.stderr)
        return EXIT_CONFIG
    logging.getLogger("evalstop.service").info("schema at revision %s, this release's head", head_revision())
    return 0


def _wait_for_schema(settings: Any, timeout_s: float, poll_s: float = 2.0) -> int:
    """Poll until the schema is at this release's head (exit 0), saying once each new reason it
    is not; after ``timeout_s``, that reason in one line and ``EXIT_CONFIG``."""
    from .store import DatabaseError, open_store
    from .store.migrate import SchemaNotCurrent, head_revision, require_head

    log = logging.getLogger("evalstop.service")
    store = open_store(settings.database_url, synchronous=settings.sqlite_synchronous, migrate=False)
    deadline, said = time.monotonic() + timeout_s, ""
    try:
        while True:
            try:
                require_head(store.engine)
                log.info("schema at revision %s, this release's head", head_revision())
                return 0
            except SchemaNotCurrent as exc:
                why = str(exc)
            except DatabaseError as exc:
                why = _cannot_open(settings.database_url, exc)
            if why != said:
                log.info("waiting for the schema: %s", why)
                said = why
            if time.monotonic() >= deadline:
                print(f"evalstop serve --wait-for-schema: gave up after {timeout_s:g} s: {why}",
                      file=sys.stderr)
                return EXIT_CONFIG
            time.sleep(poll_s)
    finally:
        store.dispose()


def _drained(_signum: int, _frame: Any) -> None:
    """SIGTERM after uvicorn's own handler is gone: the server has drained; nothing left to do."""


def _exit_on_sigterm(_signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signal.SIGTERM)
