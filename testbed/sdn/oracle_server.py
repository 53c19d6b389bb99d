"""The network cost oracle over HTTP (JSON), bound to loopback by default.

GET  /oracle  -> the four maps (bandwidth in the modelled cluster's Gbps), generated_at,
                 age_s
POST /intent  -> a TransferIntent; 202 when accepted, 400 naming the bad field, 401
                 without the bearer token (emulation.token, when set), 411/413 for a
                 missing or too large Content-Length
GET  /status  -> switches connected/ready, polls, links down (for orchestration)

The endpoint is unauthenticated unless emulation.token is set, which the scenario
requires whenever emulation.bind is not loopback.
"""

from __future__ import annotations

import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testbed.model.oracle import TransferIntent
from testbed.sdn.state import ControllerState

MAX_BODY = 4 * 1024  # an intent is ~150 bytes of JSON
MAX_ID = 256
MAX_SIZE_BYTES = 10**15  # 1 PB: no KV cache is larger


def parse_intent(body: bytes, instances: set[str]) -> TransferIntent:
    """A TransferIntent from a request body, every field checked against the fabric;
    ValueError names the field."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"body: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"body: expected a JSON object, got {type(data).__name__}")
    for name in ("request_id", "src", "dst"):
        if not isinstance(data.get(name), str) or not 0 < len(data[name]) <= MAX_ID:
            raise ValueError(f"{name}: a string of 1-{MAX_ID} characters is required")
    for name in ("src", "dst"):
        if data[name] not in instances:
            raise ValueError(f"{name}: {data[name][:40]!r} is not an instance of this fabric")
    size, prio = data.get("size_bytes"), data.get("priority", 0)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SIZE_BYTES:
        raise ValueError(f"size_bytes: an integer in [0, {MAX_SIZE_BYTES:.0e}] is required")
    if isinstance(prio, bool) or not isinstance(prio, int) or not 0 <= prio <= 7:
        raise ValueError("priority: an integer in [0, 7] is required")
    extra = set(data) - {"request_id", "src", "dst", "size_bytes", "priority"}
    if extra:
        raise ValueError(f"unknown field(s): {', '.join(sorted(extra))[:80]}")
    return TransferIntent.from_dict(data)


def make_server(state: ControllerState, host: str, port: int,
                token: str | None = None) -> ThreadingHTTPServer:
    instances = set(state.fabric.hosts)
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == "/oracle":
                doc = state.oracle().to_dict()
                doc["age_s"] = state.age_s()
                self._send(200, doc)
            elif self.path == "/status":
                self._send(200, state.status())
            else:
                self._send(404, {"error": f"no such path {self.path}; try /oracle"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/intent":
                self._send(404, {"error": f"no such path {self.path}; POST /intent"})
                return
            if token is not None and not hmac.compare_digest(
                    self.headers.get("Authorization", "").encode(),
                    f"Bearer {token}".encode()):
                self._send(401, {"error": "a bearer token is required (emulation.token)"})
                return
            raw = self.headers.get("Content-Length")
            if raw is None:
                self._send(411, {"error": "Content-Length is required"})
                return
            if not raw.strip().isdigit():
                self._send(400, {"error": f"Content-Length: not a byte count: {raw[:20]!r}"})
                return
            length = int(raw)
            if length > MAX_BODY:
                self._send(413, {"error": f"body over {MAX_BODY} bytes"})
                return
            try:
                intent = parse_intent(self.rfile.read(length), instances)
            except ValueError as exc:
                self._send(400, {"error": str(exc)})
                return
            state.store_intent(intent)
            self._send(202, {"accepted": intent.request_id})

        def log_message(self, *args) -> None:  # keep the controller's log readable
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="oracle-http", daemon=True)
    thread.start()
    return thread
