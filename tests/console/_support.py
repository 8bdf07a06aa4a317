"""Helpers of the console browser tests."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ADMIN = "admin-token-for-the-console-tests"
ROOT = Path(__file__).resolve().parents[2]
ARTEFACTS = Path(os.environ.get("EVALSTOP_SCREENSHOTS", ROOT / "results" / "console"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot under results/console/ (git-ignored test artefacts), or under
    ``$EVALSTOP_SCREENSHOTS``."""
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path
