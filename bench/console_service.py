"""The in-process service both console benchmarks drive (``console_list.py``,
``console_live.py``): a temporary SQLite file, the operator token :data:`ADMIN`, no outbox
worker; plus a tenant, a console sign-in and a best-of timer."""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr

from evalstop.service.app import create_app
from evalstop.service.settings import ServiceSettings

ADMIN = "bench-admin-token"


@contextlib.contextmanager
def service() -> Iterator[TestClient]:
    """A client of a fresh service; the database goes when the block ends."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = ServiceSettings(database_url=f"sqlite:///{tmp}/bench.db",
                                   admin_token=SecretStr(ADMIN), run_worker=False)
        with TestClient(create_app(settings)) as client:
            yield client


def tenant(client: TestClient) -> str:
    """The token of a new tenant ``bench``."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    return str(client.post("/v1/tenants", json={"name": "bench"}, headers=admin).json()["token"])


def sign_in(client: TestClient, token: str) -> None:
    """Sign in to the console with ``token`` (the client keeps the session cookie)."""
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/login").text)
    assert csrf is not None
    client.post("/ui/login", data={"token": token, "csrf": csrf.group(1)})


def best_of(client: TestClient, url: str, params: dict[str, str], n: int = 5) -> tuple[Any, float]:
    """The last reply to ``n`` GETs of ``url`` and the fastest one's milliseconds."""
    best, reply = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        reply = client.get(url, params=params)
        best = min(best, time.perf_counter() - t0)
    return reply, 1e3 * best
