"""A webhook stop receiver for tests: records each (external_ref, action, idempotency key) and
answers whether the job is stopped. Serve it with ``ThreadingHTTPServer(addr, StopHook)`` and
set ``server.state = {"log": [], "stopped": set(), "lock": threading.Lock()}``."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class StopHook(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: Any) -> None:
        pass

    def do_POST(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with state["lock"]:
            state["log"].append((msg["external_ref"], msg["action"], self.headers["Idempotency-Key"]))
            if msg["action"] in ("signal", "hard_stop"):
                state["stopped"].add(msg["external_ref"])
            stopped = msg["external_ref"] in state["stopped"]
        data = json.dumps({"stopped": stopped}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
