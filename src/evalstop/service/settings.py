"""Service configuration: one validated object, read from ``EVALSTOP_*`` environment variables
or passed to :func:`evalstop.service.app.create_app` directly. Nothing is read at import time."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    """Everything the service needs to run. Secrets are ``SecretStr`` so they never print."""

    model_config = SettingsConfigDict(env_prefix="EVALSTOP_", extra="forbid", frozen=True)

    database_url: str = "sqlite:///evalstop.db"
    #: Operator token (create tenants, see and change every job). None disables admin routes.
    admin_token: SecretStr | None = None
    #: A file holding the operator token (a mounted secret); read once at start-up, surrounding
    #: whitespace stripped. Give this or ``admin_token``, not both.
    admin_token_file: Path | None = None
    #: Bring the schema to this release's head at start-up (under an advisory lock on PostgreSQL).
    #: False: only check it is there and refuse to start otherwise; a migration job runs
    #: ``evalstop serve --migrate-only`` once instead (docs/deploy.md).
    migrate_on_start: bool = True
    #: ``FULL``: every acknowledged write survives power loss; ``NORMAL`` (WAL): survives a crash
    #: of the process, the last commits may be lost on power loss.
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    #: Commit concurrent ingests together (one fsync for many requests; each in its own savepoint).
    sqlite_group_commit: bool = True
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    max_batch: int = Field(default=1000, ge=1)
    #: Answer ordinary ``POST /v1/jobs/{id}/scores`` requests before FastAPI's routing
    #: (:mod:`evalstop.service.fastpath`; same replies). False: every request goes through the
    #: route. ``bench/service_load.py --no-fast-path`` measures what it saves.
    fast_path: bool = True
    #: On SQLite, a batch is written in units of at most this many scores, so that another job's
    #: score waits for one unit, not for the whole batch (docs/service.md, "One tenant's big batch").
    ingest_chunk: int = Field(default=100, ge=1)
    max_step: int = Field(default=10**12, ge=1)
    max_history: int = Field(default=100_000, ge=10)
    #: The most a job's rule may give a parameter that sizes its state or its work per eval
    #: (mann-kendall ``max_window``, slaq ``window``); registration above it is 422
    #: (:mod:`evalstop.service.limits`, docs/service.md).
    rule_max_window: int = Field(default=256, ge=1)
    #: Rule work charged to the tenant: a score's token covers this many ms of its rule's CPU;
    #: each further such slice costs one more token, taken after the request (docs/service.md).
    rule_ms_per_score: float = Field(default=1.0, gt=0)
    #: The most rewinds a job (or a tenant's default) may ask for (docs/rewind.md).
    max_rewinds: int = Field(default=3, ge=0, le=1000)
    #: The most bytes a job's ``target_options`` (or ``resubmit``) may take as compact JSON; their
    #: nesting is at most 32 deep (:mod:`evalstop.service.limits`, docs/service.md).
    max_options_bytes: int = Field(default=65_536, ge=1024, le=16_777_216)
    run_worker: bool = True
    worker_poll_s: float = Field(default=0.1, gt=0, le=60)
    worker_lease_s: float = Field(default=30.0, gt=0)
    worker_max_attempts: int = Field(default=8, ge=1)
    #: Outbox delivery threads per replica, and the most of them one tenant's stops may hold at
    #: once (a tenant whose receiver hangs delays only its own stops; docs/service.md, "Fair delivery").
    worker_threads: int = Field(default=8, ge=1, le=256)
    worker_per_tenant: int = Field(default=2, ge=1)
    #: Threads per replica that run score writes on PostgreSQL, each on a connection it keeps:
    #: how many transactions a replica has in flight at once (docs/service.md, "Writing scores on
    #: PostgreSQL").
    db_threads: int = Field(default=4, ge=1, le=64)
    #: Seconds between sweeps of revoked or expired console sessions (by an idle worker thread).
    session_sweep_s: float = Field(default=60.0, gt=0, le=86400)
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=60.0, gt=0)
    #: Adapters outside the built-in registry: ``{"name": "package.module:factory"}``; the factory
    #: is called with that adapter's settings as keyword arguments.
    adapter_plugins: dict[str, str] = Field(default_factory=dict)
    #: Per-adapter settings, ``{"ray": {"address": "..."}}``, handed to the adapter factory. A key
    #: ``NAME_file`` at any depth is replaced by ``NAME`` holding that file's text, stripped
    #: (``{"webhook": {"secret_file": "/run/secrets/webhook"}}``; :func:`resolve_file_keys`).
    adapter_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: A JSON file holding ``adapter_settings`` (a mounted secret); read once at start-up. Give
    #: this or ``adapter_settings``, not both.
    adapter_settings_file: Path | None = None
    #: A TOML file of pollers (MLflow, TensorBoard, trainer_state) run inside the service; see
    #: :mod:`evalstop.service.pull.serve`. None: no pull ingest.
    pull_config: Path | None = None
    #: Default per-tenant limits (each tenant's ``quota`` overrides them): a token bucket of
    #: scores (refill per second, capacity), and the most jobs a tenant may have live at once.
    tenant_scores_per_s: float = Field(default=50_000.0, gt=0)
    tenant_burst: int = Field(default=100_000, ge=1)
    tenant_max_live_jobs: int = Field(default=10_000, ge=0)
    #: Seconds a replica trusts its cached copy of a tenant's scope and quota.
    policy_cache_s: float = Field(default=5.0, ge=0)
    #: Seconds a replica trusts that a tenant token it has seen is still valid when it has not heard
    #: of a change (its listening connection was down; docs/tenants.md, "Tokens").
    token_cache_s: float = Field(default=5.0, ge=0, le=3600)

    @field_validator("database_url")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if not value.startswith(("sqlite:", "sqlite+", "postgresql:", "postgresql+")):
            raise ValueError(
                f"database_url must be a sqlite:/// or postgresql:// URL. Got {redact_url(value)!r} instead."
            )
        if value.startswith("sqlite"):
            path = _sqlite_path(value)
            if path is not None and not path.parent.is_dir():
                raise ValueError(f"database_url {value!r}: the folder {str(path.parent)!r} does not exist "
                                 "(SQLite creates the file, not its folder)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _token_from_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("admin_token_file") in (None, ""):
            return data
        if data.get("admin_token") not in (None, ""):
            raise ValueError("admin_token and admin_token_file are both set; give one of them")
        return {**data, "admin_token": read_secret_file("admin_token_file", data["admin_token_file"])}

    @model_validator(mode="before")
    @classmethod
    def _adapter_settings_from_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("adapter_settings_file") in (None, ""):
            return data
        if data.get("adapter_settings") not in (None, "", {}):
            raise ValueError("adapter_settings and adapter_settings_file are both set; give one of them")
        text = read_secret_file("adapter_settings_file", data["adapter_settings_file"])
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"adapter_settings_file {str(data['adapter_settings_file'])!r} is not JSON "
                             f"(line {exc.lineno}: {exc.msg})") from None
        return {**data, "adapter_settings": parsed}

    @field_validator("adapter_plugins")
    @classmethod
    def _plugin_paths(cls, value: dict[str, str]) -> dict[str, str]:
        for name, path in value.items():
            module, sep, attr = path.partition(":")
            if not (sep and module and attr):
                raise ValueError(f"adapter plugin {name!r} must be 'module:factory'. Got {path!r} instead.")
        return value


def read_secret_file(name: str, path: str | Path) -> str:
    """The text of the file ``path`` (a mounted secret), surrounding whitespace stripped;
    ValueError naming the setting ``name`` when it cannot be read or is empty."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name} {str(path)!r} cannot be read ({type(exc).__name__})") from None
    if not text:
        raise ValueError(f"{name} {str(path)!r} is empty")
    return text


def resolve_file_keys(owner: str, settings: Mapping[str, Any], keep: Collection[str] = ()) -> dict[str, Any]:
    """``settings`` with every ``NAME_file: PATH`` (in nested mappings too) replaced by ``NAME``
    holding that file's text (:func:`read_secret_file`): secrets come from mounted files, not from
    the configuration. ``keep``: ``*_file`` key names that ``owner`` reads itself, at any depth (a
    path it re-reads). ValueError naming the key when the file cannot be read or ``NAME`` is also
    given."""
    resolved: dict[str, Any] = {}
    for key, value in settings.items():
        where = f"{owner}.{key}"
        if isinstance(value, Mapping):
            resolved[key] = resolve_file_keys(where, value, keep)
        elif key.endswith("_file") and key not in keep and isinstance(value, str | Path):
            name = key.removesuffix("_file")
            if settings.get(name) not in (None, ""):
                raise ValueError(f"{owner}.{name} and {where} are both set; give one of them")
            resolved[name] = read_secret_file(where, value)
        else:
            resolved.setdefault(key, value)
    return resolved


def _sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL (``sqlite:////abs`` is absolute); None in memory."""
    rest = url.split("://", 1)[1] if "://" in url else ""
    name = rest.removeprefix("/").split("?", 1)[0]
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return Path(name)


def redact_url(url: str) -> str:
    """``scheme://user:secret@host`` -> ``scheme://user:***@host``: never echo a password."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not (sep and at) or ":" not in creds:
        return url
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"
