"""The backlog of a link's root qdisc, read fast enough to sample at 100 Hz or more.

The fidelity monitor asks "did this link's queue hold packets, and for how much of the
interval?" many times a second on every loaded link. pyroute2 0.9 costs about 10 ms of
CPU per tc request here (measured: `get_qdiscs(index=...)`, its dump-and-filter path), a
core and more at 100 Hz; one RTM_GETQDISC per interface on a raw netlink socket, the
replies parsed for the one counter needed, costs tens of microseconds. So this module
speaks that one request itself; everything that configures tc stays in tc.py.
"""

from __future__ import annotations

import socket

from testbed.datapath.rtnl import (
    NETLINK_ROUTE,
    NLM_F_ECHO,
    NLMSG_ERROR,
    RTM_GETQDISC,
    RTM_NEWQDISC,
    TC_H_ROOT,
    messages,
    tc_request,
    tc_stats,
)
from testbed.datapath.tc import ifindexes, per_namespace


def parse_queue(data: bytes) -> dict[int, tuple[int, int]]:
    """RTM_NEWQDISC replies in one buffer -> ifindex -> (backlog bytes, qlen packets)."""
    out: dict[int, tuple[int, int]] = {}
    for kind, start, end in messages(data):
        if kind == RTM_NEWQDISC:
            ifindex, _, _, queue = tc_stats(data, start, end)
            if queue is not None:
                out[ifindex] = (queue[1], queue[0])
    return out


class BacklogReader:
    """One netlink socket per namespace the interfaces live in (made inside it; a
    netlink socket keeps the namespace it was opened in, so one thread can then read
    them all). `read()` asks each interface's root qdisc once, in one batch per socket."""

    def __init__(self, ifnames: list[str], netns: dict[str, str] | None = None) -> None:
        self._socks: list[tuple[socket.socket, dict[int, str]]] = per_namespace(
            ifnames, netns, lambda _ipr, names: _open(names), rtnl=False)
        self._seq = 0

    def read(self, ifnames: list[str] | None = None) -> dict[str, tuple[int, int]]:
        """name -> (backlog bytes, packets queued) of its root qdisc, now; interfaces
        that are gone are left out."""
        want = None if ifnames is None else set(ifnames)
        out: dict[str, tuple[int, int]] = {}
        for sock, index in self._socks:
            asked = {i: n for i, n in index.items() if want is None or n in want}
            if not asked:
                continue
            batch = bytearray()
            for ifindex in asked:
                self._seq += 1
                batch += tc_request(RTM_GETQDISC, NLM_F_ECHO, self._seq, ifindex, TC_H_ROOT)
            sock.send(bytes(batch))
            answers = 0
            while answers < len(asked):
                data = sock.recv(1 << 16)
                answers += _count(data)
                for ifindex, value in parse_queue(data).items():
                    if ifindex in asked:
                        out[asked[ifindex]] = value
        return out

    def close(self) -> None:
        for sock, _ in self._socks:
            sock.close()
        self._socks = []


def _count(data: bytes) -> int:
    """Replies (qdiscs or errors) in one buffer."""
    return sum(kind in (RTM_NEWQDISC, NLMSG_ERROR) for kind, _, _ in messages(data))


def _open(names: list[str]) -> tuple[socket.socket, dict[int, str]]:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    sock.bind((0, 0))
    sock.settimeout(1.0)  # a kernel that never answers must not hang the monitor
    # one not there (any more) is left out, as tc.all_counters does
    return sock, {i: name for name, i in ifindexes(names).items()}
