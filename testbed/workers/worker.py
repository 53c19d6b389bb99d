"""What every worker process shares: connect to the router, say hello, wait for the
run's start, hand messages to one RealTimeLoop, leave when told (or when the router goes).
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback

from testbed.workers.channel import Connection, connect
from testbed.workers.config import RunConfig
from testbed.workers.kvstream import ConnectionPool
from testbed.workers.realtime import RealTimeLoop


class Worker:
    role = "worker"

    def __init__(self, cfg: RunConfig, instance: str):
        self.cfg = cfg
        self.instance = instance
        self.scenario = cfg.load_scenario()
        self.loop = RealTimeLoop(cfg.clock(time.time()))
        self.conn: Connection | None = None
        self.started = False
        # KV connections kept between transfers (emulation.kv_connections: persistent)
        persistent = self.scenario.emulation.kv_connections == "persistent"
        self.kv_pool = ConnectionPool() if persistent else None
        # or Mooncake's Transfer Engine in this host's namespace (kv_transport: mooncake)
        self.kv_engine = None
        if self.scenario.emulation.kv_transport == "mooncake" and \
                self.role in ("prefill", "decode"):
            from testbed.workers.transfer_engine import KVEngine

            self.kv_engine = KVEngine(cfg.hosts[instance], cfg.kv_port, persistent,
                                      dilation=cfg.dilation)

    # -- hooks -------------------------------------------------------------------------
    def handle(self, msg: dict) -> None:
        """A message from the router, on the loop thread."""

    def on_start(self) -> None:
        """The run's clock has started (loop thread)."""

    def hello_extra(self) -> list[dict]:
        """Messages to send right after hello (e.g. an initial state report)."""
        return []

    def shutdown(self) -> None:
        """Release sockets and threads before the process exits."""

    def beat(self) -> None:
        """The liveness signal the router's failure detector counts (recovery.heartbeat_s),
        from every worker that runs a decode engine."""
        self.send({"type": "heartbeat", "instance": self.instance, "time": self.loop.now})
        self.loop.after(self.scenario.recovery.heartbeat_s, self.beat)

    # -- plumbing ----------------------------------------------------------------------
    def send(self, msg: dict) -> None:
        if self.conn is not None and not self.conn.closed:
            try:
                self.conn.send(msg)
            except OSError:
                self.loop.stop()

    def _dispatch(self, msg: dict) -> None:
        kind = msg["type"]
        if kind == "start":
            self.loop.clock = self.cfg.clock(float(msg["t0"]))
            self.loop.watch()
            self.started = True
            self.on_start()
        elif kind == "clock":  # the router measures this machine's clock against its own
            self.send({"type": "clock", "instance": self.instance, "sent": msg["sent"],
                       "wall": time.time()})
        elif kind == "stop":
            self.loop.stop()
        else:
            self.handle(msg)

    def run(self) -> int:
        """Serve the run; `self.conn` may already be open (a worker that connected before
        entering its host's namespace)."""
        try:
            self.conn = self.conn or connect(self.cfg.router_socket, self.instance)
            # from another machine, the router measures its clock (probes) and corrects
            # "start" for it
            self.conn.send({"type": "hello", "role": self.role, "instance": self.instance,
                            "pid": os.getpid(), "token": self.cfg.control_token,
                            "machine": socket.gethostname()})
            for msg in self.hello_extra():
                self.conn.send(msg)
            self.conn.read_forever(lambda _c, m: self.loop.post(lambda: self._dispatch(m)),
                                   lambda _c, _why: self.loop.stop())
            self.loop.run()
            return 0
        except Exception:  # noqa: BLE001 - a worker must say why it died, then exit non-zero
            traceback.print_exc(file=sys.stderr)
            if self.conn is not None:
                self.send({"type": "heartbeat", "instance": self.instance, "time": -1.0,
                           "error": traceback.format_exc(limit=3)})
            return 1
        finally:
            self.shutdown()
            if self.kv_pool is not None:
                self.kv_pool.close()
            if self.conn is not None:
                self.conn.close()
            self.loop.lateness.write(self.cfg.out, self.instance, self.cfg.dilation)
