"""The network cost oracle over HTTP (JSON), bound to loopback by default.

GET  /oracle  -> the four maps (bandwidth in the modelled cluster's Gbps), generated_at,
                 age_s
POST /intent  -> a TransferIntent; 202 when accepted, 400 naming the bad field
GET  /status  -> switches connected/ready, polls, links down (for orchestration)
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testbed.controller.state import ControllerState
from testbed.model.oracle import TransferIntent

MAX_BODY = 64 * 1024


def make_server(state: ControllerState, host: str, port: int) -> ThreadingHTTPServer:
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
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, {"error": "body too large"})
                return
            try:
                intent = TransferIntent.from_dict(json.loads(self.rfile.read(length)))
            except (ValueError, json.JSONDecodeError) as exc:
                self._send(400, {"error": str(exc)})
                return
            with state.lock:
                state.intents.append(intent)
                state.intents_total += 1
                del state.intents[:-10000]
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
