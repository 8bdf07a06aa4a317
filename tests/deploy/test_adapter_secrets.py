"""Adapter secrets out of the configuration: ``EVALSTOP_ADAPTER_SETTINGS_FILE`` (the whole JSON
from a mounted secret) and ``NAME_file`` keys (one secret per mounted file, in nested settings
too); a built-in target without settings is "not configured", an unknown name is "unknown"."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import ValidationError

from evalstop.service.adapters import JobRef
from evalstop.service.adapters._webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify_signature
from evalstop.service.settings import ServiceSettings, resolve_file_keys
from evalstop.service.targets import AdapterRegistry, TargetNotConfigured, UnknownTarget

from ._podman import ROOT


def _secret(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_file_keys_are_read_at_any_depth_and_kept_where_the_adapter_reads_them(tmp_path: Path) -> None:
    hook = _secret(tmp_path, "hook", "  s3cret\n")
    alice = _secret(tmp_path, "alice", "jwt-a\n")
    given = {"url": "https://h/x", "secret_file": str(hook),
             "users": {"alice": {"token_file": str(alice), "name": "alice"}}, "ca_file": "/etc/ca.pem"}
    assert resolve_file_keys("webhook", given, keep={"ca_file"}) == {
        "url": "https://h/x", "secret": "s3cret", "users": {"alice": {"token": "jwt-a", "name": "alice"}},
        "ca_file": "/etc/ca.pem"}
    kept = resolve_file_keys("slurm", {"submit_as": {"t": {"token_file": str(alice)}}}, keep={"token_file"})
    assert kept == {"submit_as": {"t": {"token_file": str(alice)}}}  # an adapter that re-reads it


@pytest.mark.parametrize(("settings", "message"), [
    ({"secret": "x", "secret_file": "{hook}"}, "webhook.secret and webhook.secret_file are both set"),
    ({"secret_file": "{missing}"}, "webhook.secret_file '{missing}' cannot be read (FileNotFoundError)"),
    ({"users": {"bob": {"token_file": "{empty}"}}}, "webhook.users.bob.token_file '{empty}' is empty"),
])
def test_a_bad_file_key_names_the_key(tmp_path: Path, settings: dict[str, object], message: str) -> None:
    paths = {"hook": _secret(tmp_path, "hook", "s"), "missing": tmp_path / "nope",
             "empty": _secret(tmp_path, "empty", "\n")}

    def fill(value: object) -> object:
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return str(value).format(**paths)

    with pytest.raises(ValueError, match="^" + re.escape(message.format(**paths))):
        resolve_file_keys("webhook", fill(settings))  # type: ignore[arg-type]


def test_adapter_settings_come_from_a_json_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"webhook": {"url": "https://h/x", "secret_file": "/run/secrets/hook"}}
    path = _secret(tmp_path, "adapters.json", json.dumps(doc))
    monkeypatch.setenv("EVALSTOP_ADAPTER_SETTINGS_FILE", str(path))
    assert ServiceSettings().adapter_settings == doc
    monkeypatch.setenv("EVALSTOP_ADAPTER_SETTINGS", json.dumps(doc))
    with pytest.raises(ValidationError, match="adapter_settings and adapter_settings_file are both set"):
        ServiceSettings()
    monkeypatch.delenv("EVALSTOP_ADAPTER_SETTINGS")
    path.write_text("{webhook: 1}")
    with pytest.raises(ValidationError, match=r"adapter_settings_file '.*' is not JSON \(line 1"):
        ServiceSettings()


def test_serve_with_an_unreadable_adapter_settings_file_is_one_line_and_status_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSTOP_")}
    env.update(PYTHONPATH=str(ROOT / "src"), EVALSTOP_ADAPTER_SETTINGS_FILE=str(tmp_path / "nope.json"))
    argv = [sys.executable, "-m", "evalstop.cli", "serve", "--database-url", f"sqlite:///{tmp_path / 'e.db'}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    missing = str(tmp_path / "nope.json")
    assert proc.stderr.strip().splitlines() == [
        f"evalstop serve: adapter_settings_file {missing!r} cannot be read (FileNotFoundError)"]


class _Capture(BaseHTTPRequestHandler):
    """A webhook receiver that keeps each request's body and headers."""

    seen: ClassVar[list[tuple[bytes, dict[str, str]]]] = []

    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        self.seen.append((self.rfile.read(int(self.headers["Content-Length"])), dict(self.headers)))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


def test_the_webhook_signs_with_the_secret_from_its_file(tmp_path: Path) -> None:
    hook = _secret(tmp_path, "hook", "from-the-file\n")
    server = HTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        registry = AdapterRegistry(settings={"webhook": {"url": url, "secret_file": str(hook)}})
        adapter = registry.get("webhook")
        adapter.signal(JobRef(job_id="j1", tenant="t", external_ref="r1"))
        registry.close()
    finally:
        server.shutdown()
        server.server_close()
    body, headers = _Capture.seen[-1]
    assert verify_signature("from-the-file", headers[TIMESTAMP_HEADER], body, headers[SIGNATURE_HEADER])
    assert "from-the-file" not in repr(adapter)


def test_a_target_without_settings_is_not_configured_and_an_unknown_one_is_unknown() -> None:
    registry = AdapterRegistry()
    with pytest.raises(TargetNotConfigured, match="Enforcement target 'webhook' is not configured on this "
                       "service: The 'url' setting of the webhook adapter"):
        registry.get("webhook")
    with pytest.raises(UnknownTarget, match="Unknown enforcement target 'nope': one of") as unknown:
        registry.get("nope")
    assert not isinstance(unknown.value, TargetNotConfigured)


def test_the_kubernetes_adapter_keeps_its_token_file_a_path(tmp_path: Path) -> None:
    token = _secret(tmp_path, "token", "sa-token-1")
    given = {"api_url": "https://k.example", "token_file": str(token), "ca_file": str(tmp_path / "no-ca")}
    adapter = AdapterRegistry(settings={"kubernetes": given}).get("kubernetes")
    assert adapter._token_file == token  # type: ignore[attr-defined]  # re-read: the projected token rotates
