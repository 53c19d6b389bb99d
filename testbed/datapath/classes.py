"""Every HTB class's counters on a set of devices, over raw rtnetlink: one class dump per
device (RTM_GETTCLASS filtered by ifindex), parsed for bytes, packets and the queue's
counters only. The controller's poller and the fidelity monitor read them every
interval; pyroute2's get_links() + get_classes() decoded every attribute of every device
and class and was most of the monitor's CPU (measured: 639 of 1,062 busy samples of an
emulation's parent process)."""

from __future__ import annotations

import socket

from testbed.datapath.rtnl import (
    NETLINK_ROUTE,
    NLM_F_DUMP,
    NLMSG_DONE,
    NLMSG_ERROR,
    RTM_GETTCLASS,
    RTM_NEWTCLASS,
    messages,
    tc_request,
    tc_stats,
)

COUNTERS = ("bytes", "packets", "drops", "overlimits", "backlog")
Counters = tuple[int, int, int, int, int]  # in that order


def read_classes(ifindexes: dict[str, int]) -> dict[str, dict[int, Counters]]:
    """name -> class handle -> counters, for the devices of this thread's namespace
    (`ifindexes`: name -> ifindex there). A device gone meanwhile has no classes."""
    out: dict[str, dict[int, Counters]] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        sock.settimeout(1.0)  # a kernel that never answers must not hang a reader
        for seq, (name, ifindex) in enumerate(ifindexes.items(), start=1):
            sock.send(tc_request(RTM_GETTCLASS, NLM_F_DUMP, seq, ifindex))
            out[name] = _dump(sock, ifindex)
    return out


def _dump(sock: socket.socket, ifindex: int) -> dict[int, Counters]:
    got: dict[int, Counters] = {}
    while True:
        data = sock.recv(1 << 16)
        for kind, start, end in messages(data):
            if kind in (NLMSG_DONE, NLMSG_ERROR):
                return got
            if kind != RTM_NEWTCLASS:
                continue
            index, handle, basic, queue = tc_stats(data, start, end)
            if index == ifindex:
                b, p = basic or (0, 0)
                _, backlog, drops, _, overlimits = queue or (0, 0, 0, 0, 0)
                got[handle] = (b, p, drops, overlimits, backlog)
