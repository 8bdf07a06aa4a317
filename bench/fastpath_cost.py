"""What the scores fast path (``service/fastpath.py``) saves: CPU per single-score POST through the
whole ASGI app, with the fast path and with every request going through FastAPI's route.

Two apps are built in this process (``create_app`` with ``fast_path`` on and off, each on its own
SQLite file, the same admin token, one tenant and one job each) and driven by raw ASGI calls (no
sockets, no HTTP client), so what differs is only the app's own work. They are timed in
alternating blocks of ``--block`` requests (``time.process_time``: this process's CPU, which other
processes on a busy machine do not add to), and the median block of each is reported, with the
ratio route / fast path.

    .venv/bin/python bench/fastpath_cost.py                 # 30 blocks of 200 requests each
    .venv/bin/python bench/fastpath_cost.py --blocks 10 --db postgresql

Both replies are checked to be the same (status and body, but the job id) before timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from fastapi import FastAPI
from pydantic import SecretStr
from service_load import start_postgres

from evalstop.service.app import create_app
from evalstop.service.settings import ServiceSettings

ADMIN = "bench-admin-token-0123456789"


class Caller:
    """One app, called with raw ASGI messages."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def call(self, method: str, path: str, token: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        raw = json.dumps(body).encode() if body is not None else b""
        headers = [(b"authorization", f"Bearer {token}".encode()), (b"content-type", b"application/json"),
                   (b"content-length", str(len(raw)).encode())]
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "headers": headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.sleep(3600)
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        status, chunks = 0, []

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        payload = b"".join(chunks)
        return status, json.loads(payload) if payload else None


async def setup(app: FastAPI, tenant_name: str) -> tuple[Caller, str, str]:
    caller = Caller(app)
    status, tenant = await caller.call("POST", "/v1/tenants", ADMIN, {"name": tenant_name})
    assert status in (200, 201), (status, tenant)
    token = tenant["token"]
    status, job = await caller.call("POST", "/v1/jobs", token,
                                    {"external_ref": f"{tenant_name}-1", "target": "dry-run",
                                     "detector": "evalstop:k=1000000"})
    assert status in (200, 201), (status, job)
    return caller, token, job["id"]


async def run(args: argparse.Namespace, urls: list[str]) -> dict[str, Any]:
    apps = {name: create_app(ServiceSettings(database_url=url, admin_token=SecretStr(ADMIN), run_worker=False,
                                             fast_path=name == "fast path"))
            for name, url in zip(("fast path", "route"), urls, strict=True)}
    callers = {name: await setup(app, f"bench{i}") for i, (name, app) in enumerate(apps.items())}
    step = 0
    replies = {}
    for name, (caller, token, job) in callers.items():  # same reply either way
        path = f"/v1/jobs/{job}/scores"
        status, body = await caller.call("POST", path, token, {"step": step, "value": 0.5})
        replies[name] = (status, {k: v for k, v in body.items() if k != "job_id"})
    assert replies["fast path"] == replies["route"], replies
    for _ in range(200):  # warm up both: caches, prepared statements
        step += 1
        for caller, token, job in callers.values():
            await caller.call("POST", f"/v1/jobs/{job}/scores", token, {"step": step, "value": 0.5})
    per_request: dict[str, list[float]] = {name: [] for name in callers}
    for block in range(args.blocks):
        order = list(callers) if block % 2 == 0 else list(reversed(callers))
        for name in order:
            caller, token, job = callers[name]
            start_step = step
            c0 = time.process_time()
            for i in range(args.block):
                await caller.call("POST", f"/v1/jobs/{job}/scores", token,
                                  {"step": start_step + 1 + i, "value": 0.5})
            per_request[name].append((time.process_time() - c0) / args.block)
        step += args.block
    for app in apps.values():
        app.state.ctx.store.dispose()
    med = {name: statistics.median(v) for name, v in per_request.items()}
    return {"cpu_ms_per_request": {k: round(1000 * v, 4) for k, v in med.items()},
            "ratio_route_over_fast_path": round(med["route"] / med["fast path"], 3),
            "blocks": args.blocks, "block": args.block, "db": args.db}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=30)
    p.add_argument("--block", type=int, default=200, help="requests per timed block")
    p.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    stop = None
    with tempfile.TemporaryDirectory(prefix="evalstop-fastpath-") as tmp:
        if args.db == "postgresql":
            base, stop, _ = start_postgres()
            urls = [base, base]
        else:
            urls = [f"sqlite:///{tmp}/fast.db", f"sqlite:///{tmp}/route.db"]
        load_before = os.getloadavg()
        try:
            result = asyncio.run(run(args, urls))
        finally:
            if stop is not None:
                stop()
    result["load_avg_before"], result["load_avg_after"] = load_before, os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        c = result["cpu_ms_per_request"]
        print(f"single-score POST, whole ASGI app, {args.db}: CPU {c['fast path']} ms with the fast path, "
              f"{c['route']} ms through the route (ratio {result['ratio_route_over_fast_path']}); "
              f"median of {args.blocks} blocks of {args.block}; load {load_before[0]:.1f} -> "
              f"{result['load_avg_after'][0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
