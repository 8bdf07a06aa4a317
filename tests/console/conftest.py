"""A real ``evalstop serve`` subprocess on loopback and a real headless Chromium (Debian's
``chromium`` package, driven by Playwright through ``executable_path``; installed by
scripts/setup.d/70-console.sh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed: pip install -e '.[service]'")
from ._support import ADMIN, ARGS, CHROMIUM, ROOT, free_port, wait_for


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}; scripts/setup.d/70-console.sh should install it")
    pytest.skip(what)


# Package scope, not session: Playwright's sync API runs an event loop in the main thread until it
# stops, and later tests (tests/service) call asyncio.run().
@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[console-test]')")
    if not CHROMIUM.exists():
        _missing(f"{CHROMIUM} not found (apt-get install chromium)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``evalstop serve`` (with its outbox worker) on a free loopback port: its base URL, and the
    file whose existence makes the ``receiver-down`` target fail."""
    import httpx

    tmp = tmp_path_factory.mktemp("console")
    port, log = free_port(), (tmp / "server.log").open("ab")
    down = tmp / "receiver-down"
    down.touch()
    env = {**os.environ, "EVALSTOP_ADMIN_TOKEN": ADMIN, "EVALSTOP_WORKER_POLL_S": "0.05",
           "EVALSTOP_ADAPTER_PLUGINS": json.dumps({"receiver-down": "receiver_down:ReceiverDown"}),
           "EVALSTOP_ADAPTER_SETTINGS": json.dumps({"receiver-down": {"down_file": str(down)}}),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(Path(__file__).parent),
                                          os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "evalstop.cli", "serve", "--database-url",
                             f"sqlite:///{tmp / 'evalstop.db'}", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, (tmp / "server.log").read_text()
        try:
            return httpx.get(base + "/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 30, "evalstop serve to be ready")
        yield base, down
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
