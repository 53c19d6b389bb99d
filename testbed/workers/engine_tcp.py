"""Why an engine's transfer was slow: TCP_INFO of the Transfer Engine's own connections.

The engine opens and keeps its TCP connections inside the library, so no socket object
reaches the caller; but they are this process's file descriptors. At a shard's end the
sender duplicates each descriptor that is a TCP connection to the shard's target on one
of the engine's ports (the target's RPC and handshake ports: engine_ports), reads its
TCP_INFO, and records what every such connection did since the last look (the pusher's
rows keep the same counters per connection; tcpinfo.RECORDED).

Which of the engine's connections carried which shard the library does not say: a row
gets what its target's connections did since the previous row to that target ended, so
summed over rows the counters are exact, per row they are what was resent around it;
the round trips are the busiest connection's. A connection the engine closed before the
look (one per write, when KV connections are not kept) is missed: the row says None.
`combine` is pure.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterable

from testbed.workers import tcpinfo

FD_DIR = "/proc/self/fd"


def combine(before: dict[tuple, dict], now: dict[tuple, dict]) -> dict | None:
    """Per connection (key -> TCP_INFO), what they did since `before`: the RECORDED
    and LIMITS counters summed, the round trips of the one that sent most segments; None
    if none."""
    if not now:
        return None
    counters = tcpinfo.RECORDED + tcpinfo.LIMITS
    out: dict = {k: 0 for k in counters}
    busiest, sent_most = None, -1
    for key, info in now.items():
        old = before.get(key, {})
        if (info.get("data_segs_out") or 0) < (old.get("data_segs_out") or 0):
            old = {}  # the same addresses, a new connection
        for k in counters:
            v = info.get(k)
            if v is None or out[k] is None:
                out[k] = None
            else:
                out[k] += v - (old.get(k) or 0)
        sent = (info.get("data_segs_out") or 0) - (old.get("data_segs_out") or 0)
        if sent > sent_most:
            busiest, sent_most = info, sent
    return out | {k: busiest.get(k) for k in tcpinfo.ROUND_TRIPS}


def _sockets() -> Iterable[socket.socket]:
    """A duplicate of each of this process's sockets (the caller closes it)."""
    for name in os.listdir(FD_DIR):
        try:
            if not os.readlink(f"{FD_DIR}/{name}").startswith("socket:"):
                continue
            fd = os.dup(int(name))
        except (OSError, ValueError):  # closed meanwhile
            continue
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # reused meanwhile, for something else
            os.close(fd)
            continue
        yield sock


def connections(target: str, ports: Iterable[int]) -> dict[tuple, dict]:
    """TCP_INFO of this process's TCP connections to `target` on `ports`, by their
    (local, peer) addresses."""
    ports = set(ports)
    out: dict[tuple, dict] = {}
    for sock in _sockets():
        with sock:
            if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
                continue
            try:
                peer = sock.getpeername()
                key = (sock.getsockname(), peer)
            except OSError:  # a listener, or not connected yet
                continue
            if peer[0] == target and peer[1] in ports:
                info = tcpinfo.read(sock)
                if info is not None:
                    out[key] = info
    return out


class EngineStalls:
    """The counters of one engine's connections, per target, since the last look."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[tuple, dict]] = {}
        self._lock = threading.Lock()

    def look(self, target: str, ports: Iterable[int]) -> dict | None:
        now = connections(target, ports)
        with self._lock:
            before = self._seen.get(target, {})
            self._seen[target] = now
        return combine(before, now)
