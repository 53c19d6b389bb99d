"""Raw rtnetlink for the two tc reads that run many times a second: the message layout
and its parsing, no sockets' policy. pyroute2 decodes every attribute of every reply
into Python objects (about 10 ms of CPU per request here), which the fidelity monitor
and the controller's poller cannot afford at their rates; they need a few counters."""

from __future__ import annotations

import struct

NETLINK_ROUTE = 0
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
RTM_NEWTCLASS, RTM_GETTCLASS = 40, 42
NLM_F_REQUEST = 0x1
NLM_F_ECHO = 0x8  # a tc get answers the asker only when asked to echo
NLM_F_DUMP = 0x300
TC_H_ROOT = 0xFFFFFFFF
TCA_STATS2 = 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
NLA = struct.Struct("=HH")  # len, type
QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
BASIC = struct.Struct("=QI")  # bytes, packets


def align(n: int) -> int:
    return (n + 3) & ~3


def attrs(data: bytes, start: int, end: int):
    """(type, start, end) of each attribute between start and end."""
    while start + 4 <= end:
        length, kind = NLA.unpack_from(data, start)
        if length < 4:
            return
        yield kind & 0x7FFF, start + 4, start + length
        start += align(length)


def messages(data: bytes):
    """(type, start, end) of each netlink message in one buffer."""
    pos = 0
    while pos + NLMSG.size <= len(data):
        length, kind, _, _, _ = NLMSG.unpack_from(data, pos)
        if length < NLMSG.size:
            return
        yield kind, pos, pos + length
        pos += align(length)


def tc_request(kind: int, flags: int, seq: int, ifindex: int, parent: int = 0) -> bytes:
    return (NLMSG.pack(NLMSG.size + TCMSG.size, kind, NLM_F_REQUEST | flags, seq, 0)
            + TCMSG.pack(0, ifindex, 0, parent, 0))


def tc_stats(data: bytes, start: int, end: int) -> tuple[int, int, tuple[int, ...] | None,
                                                          tuple[int, ...] | None]:
    """One tc message (qdisc or class) -> (ifindex, handle, basic, queue): basic is
    (bytes, packets), queue (qlen, backlog, drops, requeues, overlimits); None if absent."""
    _, ifindex, handle, _, _ = TCMSG.unpack_from(data, start + NLMSG.size)
    basic = queue = None
    for a, lo, hi in attrs(data, start + NLMSG.size + TCMSG.size, end):
        if a != TCA_STATS2:
            continue
        for b, slo, shi in attrs(data, lo, hi):
            if b == TCA_STATS_QUEUE and shi - slo >= QUEUE.size:
                queue = QUEUE.unpack_from(data, slo)
            elif b == TCA_STATS_BASIC and shi - slo >= BASIC.size:
                basic = BASIC.unpack_from(data, slo)
    return ifindex, handle, basic, queue
