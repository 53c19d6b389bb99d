"""The router's first oracle: asked again while the controller does not answer, and a
clear error naming how often it tried when it never does."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from testbed.workers.router.network_view import first_oracle

DOC = {"tier_map": [["h1", "h2", 1]], "tier_bandwidth": {"1": 100},
       "tier_latency": {"1": 2}, "congestion": {"1": 0.25}}


def test_a_first_request_dropped_is_asked_again_and_the_oracle_arrives():
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve():  # the first connection dropped unanswered, the second answered
        for n in range(2):
            conn, _ = server.accept()
            accepted.append(n)
            with conn:
                if n:
                    conn.recv(4096)
                    body = json.dumps(DOC).encode()
                    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with server:
        oracle = first_oracle(f"http://127.0.0.1:{server.getsockname()[1]}/oracle",
                              within_s=20)
    thread.join(timeout=10)
    assert accepted == [0, 1]
    assert oracle.congestion == {1: 0.25}


def test_an_oracle_that_never_answers_fails_naming_the_tries():
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(OSError, match=r"tries in 1 s"):
        first_oracle(f"http://127.0.0.1:{port}/oracle", within_s=1)
