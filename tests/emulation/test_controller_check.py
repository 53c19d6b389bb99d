"""The fabric's controller node never probes the controller's port: Mininet's check runs
telnet in a node shell, and when the controller's binary OpenFlow HELLO reaches telnet
first, telnet prints it and Mininet's reading of the shell fails (a side-by-side fabric
was lost to it in CI)."""

from __future__ import annotations

import socket
import threading

import pytest

from testbed.emulation.ovs.switches import remote_controller

pytestmark = pytest.mark.root


def accepted_while(make) -> int:
    """Connections a loopback listener accepted while `make(port)` built a controller
    node (then torn down)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    count = 0

    def serve() -> None:
        nonlocal count
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            count += 1
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    node = make(port)
    try:
        assert node.cmd("echo alive").strip() == "alive"  # its shell works
    finally:
        node.terminate()
        server.close()
        thread.join(timeout=5)
    return count


def test_the_controller_node_leaves_the_port_alone_where_mininet_s_probes_it():
    from mininet.node import RemoteController

    # the contrast: Mininet's own class connects (the race's precondition) ...
    assert accepted_while(lambda port: RemoteController("c8", ip="127.0.0.1", port=port)) == 1
    # ... the testbed's does not
    assert accepted_while(lambda port: remote_controller("c9", "127.0.0.1", port)) == 0
