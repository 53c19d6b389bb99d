"""`testbed controller`: start the os-ken app, the oracle and the metrics exporter.

os-ken 4.x ships no manager script, so this is the entry point: parse os-ken's options,
serve HTTP and Prometheus from our own threads, then AppManager.run_apps. SIGTERM and
SIGINT stop everything at once (the controller holds nothing that needs flushing).
"""

from __future__ import annotations

import logging
import os
import signal

from testbed.sdn.exporter import Metrics
from testbed.sdn.oracle_server import make_server, serve_in_thread
from testbed.sdn.state import ControllerState
from testbed.topologies.fabric import Fabric


def run(fabric: Fabric, of_port: int, oracle_port: int, metrics_port: int,
        bind: str = "127.0.0.1", poll_s: float = 1.0, ecmp: str = "per-flow",
        kv_ports: tuple[int, ...] = (7000,), daemons: int = 0,
        openflow_sockets: tuple[str, ...] = (), token: str | None = None,
        read_counters=None) -> None:
    """`read_counters`: how the poller reads switch-port counters (tc.all_counters'
    signature); a cluster run passes one that asks every server."""
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    from os_ken.controller import controller as _of  # noqa: F401 - registers ofp options

    from testbed.sdn import app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("os_ken").setLevel(logging.WARNING)
    state = ControllerState(fabric)
    metrics = Metrics()
    app.RUNTIME = app.Runtime(state, metrics, poll_s, ecmp, kv_ports, (oracle_port,),
                              daemons, read_counters)
    cfg.CONF(args=["--ofp-tcp-listen-port", str(of_port), "--ofp-listen-host", bind],
             project="os_ken")
    server = make_server(state, bind, oracle_port, token)
    serve_in_thread(server)
    metrics.serve(bind, metrics_port)
    for path in openflow_sockets:
        serve_openflow_unix(path)

    def stop(signum, _frame):
        # os-ken 4.2's run_apps cannot unwind (its cleanup calls HubThread.kill, which
        # does not exist with native threads): close our servers and leave at once.
        server.shutdown()
        logging.getLogger("testbed.sdn").info("stopped by signal %d", signum)
        logging.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.getLogger("testbed.sdn").info(
        "OpenFlow on %s:%d, oracle on http://%s:%d/oracle, metrics on http://%s:%d/metrics",
        bind, of_port, bind, oracle_port, bind, metrics_port)
    AppManager.run_apps(["testbed.sdn.app"])


class _UnixStream:
    """A unix stream socket that os-ken's Datapath can take: it sets TCP_NODELAY, which a
    unix socket has no use for (and refuses)."""

    def __init__(self, sock):
        self._sock = sock

    def setsockopt(self, level, option, value):
        import socket

        if level != socket.IPPROTO_TCP:
            self._sock.setsockopt(level, option, value)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def serve_openflow_unix(path: str) -> None:
    """OpenFlow on a unix socket as well: switches of a daemon in another network
    namespace cannot reach this namespace's loopback, but a filesystem path is shared.
    ovs-vswitchd dials unix sockets only inside its own run directory."""
    from pathlib import Path

    from os_ken.controller.controller import datapath_connection_factory
    from os_ken.lib import hub

    Path(path).unlink(missing_ok=True)
    server = hub.StreamServer(
        (path, None), lambda sock, _addr: datapath_connection_factory(_UnixStream(sock), path))
    hub.spawn(server.serve_forever)
