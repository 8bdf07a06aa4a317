"""Helpers every adapter shares: settings, HTTP error mapping, checkpoint pin markers, the
environment of the commands the service runs."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from evalstop._validation import InvalidParameterError
from evalstop.service.adapters._base import AdapterError, JobRef
from evalstop.service.adapters._pinfs import PinRefused, write_confined_marker
from evalstop.service.adapters._scope import has_traversal, local_roots

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("evalstop.service.adapters")

PIN_MARKER = ".evalstop-pin.json"
RETRYABLE_STATUS = frozenset({408, 425, 429})
#: All a command the service runs (``sbatch``, ``scontrol``...) keeps of the service's own
#: environment. Everything else stays behind: the ``EVALSTOP_*`` settings (admin token, database
#: URL with its password, adapter settings with their tokens), cloud credentials, ``LD_*``.
COMMAND_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def command_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a command the service runs: :data:`COMMAND_ENV` from the
    service's own (``PATH`` defaults to :data:`DEFAULT_PATH`), plus ``extra`` (operator
    settings such as ``SLURM_CONF``, never a tenant's values)."""
    env = {name: os.environ[name] for name in COMMAND_ENV if os.environ.get(name)}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(extra or {})
    return env


def setting_str(owner: str, settings: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = settings.get(key, default)
    if not isinstance(value, str) or not value:
        raise InvalidParameterError(
            f"The {key!r} setting of the {owner} adapter must be a non-empty string. Got {value!r} instead. "
            f"evalstop serve reads adapter settings from EVALSTOP_ADAPTER_SETTINGS, e.g. "
            f"'{{\"{owner}\": {{\"{key}\": \"...\"}}}}' (docs/service.md, Configuration)."
        )
    return value


def setting_float(owner: str, settings: Mapping[str, Any], key: str, default: float) -> float:
    value = settings.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if not ok:
        raise InvalidParameterError(
            f"The {key!r} setting of the {owner} adapter must be a number > 0. Got {value!r} instead."
        )
    return float(value)


def import_httpx(owner: str) -> Any:
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            f"The {owner} adapter needs httpx: pip install -e '.[service]'"
        ) from exc
    return httpx


def send(client: httpx.Client, method: str, url: str, *, what: str, **kwargs: Any) -> httpx.Response:
    """One HTTP call; a transport failure or timeout becomes a retryable :class:`AdapterError`."""
    httpx = import_httpx("HTTP")
    try:
        return client.request(method, url, **kwargs)
    except httpx.TimeoutException as exc:
        raise AdapterError(f"{what}: timed out ({type(exc).__name__})", retryable=True) from exc
    except httpx.TransportError as exc:
        raise AdapterError(f"{what}: {type(exc).__name__}: {exc}", retryable=True) from exc


def fail_for_status(resp: httpx.Response, what: str, *, retry_on: frozenset[int] = RETRYABLE_STATUS) -> None:
    """Raise for a non-2xx reply: 5xx and ``retry_on`` codes are retryable; 3xx (redirects are
    not followed: a moved endpoint is a configuration error) and other 4xx are not."""
    code = resp.status_code
    if 200 <= code < 300:
        return
    retryable = code >= 500 or code in retry_on
    body = resp.text[:300].replace("\n", " ")
    raise AdapterError(f"{what}: HTTP {code}", retryable=retryable, detail=body)


def json_body(resp: httpx.Response, what: str) -> Any:
    """The decoded JSON reply; anything else (a proxy's HTML page) is a retryable error."""
    try:
        return resp.json()
    except ValueError as exc:
        raise AdapterError(f"{what}: HTTP {resp.status_code} reply is not JSON", retryable=True,
                           detail=resp.text[:200]) from exc


def local_path(uri: str) -> Path | None:
    """The filesystem path behind ``uri`` (a plain path or ``file://``), else None."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" and uri.startswith("/"):
        return Path(uri)
    return None


def pin_record(job: JobRef, checkpoint_uri: str, adapter: str) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "tenant": job.tenant,
        "external_ref": job.external_ref,
        "checkpoint_uri": checkpoint_uri,
        "adapter": adapter,
        "pinned_at": time.time(),
    }


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(payload, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def already_pinned(path: Path, checkpoint_uri: str) -> bool:
    try:
        return bool(json.loads(path.read_text()).get("checkpoint_uri") == checkpoint_uri)
    except (OSError, ValueError):
        return False


def _confined_pin(job: JobRef, checkpoint_uri: str, path: Path, adapter: str) -> Path | None:
    """The marker written under the tenant's checkpoint roots (see :mod:`._pinfs`), or None when
    refused (logged: the stop goes on, the pin_dir record and the decision still name the URI)."""
    roots = local_roots(list(job.scope.get("checkpoint_prefixes") or ())) if job.scope else []
    try:
        if has_traversal(checkpoint_uri):
            raise PinRefused(f"{checkpoint_uri!r} contains a '.' or '..' segment")
        record = pin_record(job, checkpoint_uri, adapter)
        written = write_confined_marker(str(path), roots, PIN_MARKER, record)
    except PinRefused as exc:
        log.warning("job %s: pin marker refused: %s", job.job_id, exc)
        return None
    except OSError as exc:
        raise AdapterError(f"pin {checkpoint_uri} for job {job.job_id}: {exc}", retryable=True) from exc
    return Path(written)


def write_pin_marker(job: JobRef, checkpoint_uri: str, adapter: str, pin_dir: str | None) -> list[Path]:
    """Write the pin where something can see it; return the marker files (existing ones count).

    A local checkpoint gets ``.evalstop-pin.json`` inside it (or beside it, for a file); with
    ``pin_dir`` set, ``<pin_dir>/<tenant>/<job_id>.json`` records the pin for any URI scheme.
    """
    targets: list[Path] = []
    confined: list[Path] = []
    path = local_path(checkpoint_uri)
    if path is not None and job.scope is not None:  # a tenant's job: only under its declared roots
        marker = _confined_pin(job, checkpoint_uri, path, adapter)
        confined = [] if marker is None else [marker]
    elif path is not None and path.exists():
        targets.append(path / PIN_MARKER if path.is_dir() else path.with_name(path.name + PIN_MARKER))
    if pin_dir:
        targets.append(Path(pin_dir) / job.tenant / f"{job.job_id}.json")
    for target in targets:
        if not already_pinned(target, checkpoint_uri):
            try:
                write_json_atomic(target, pin_record(job, checkpoint_uri, adapter))
            except PermissionError as exc:  # advisory marker: never block a stop on it
                log.warning("job %s: cannot write pin marker %s: %s", job.job_id, target, exc)
            except OSError as exc:
                message = f"pin {checkpoint_uri} for job {job.job_id}: {exc}"
                raise AdapterError(message, retryable=True) from exc
    targets = confined + targets
    if not targets:
        log.warning("job %s: checkpoint %s is not local and no pin_dir is set; pin recorded by the "
                    "service only", job.job_id, checkpoint_uri)
    return targets
