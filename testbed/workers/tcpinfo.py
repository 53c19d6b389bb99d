"""Why a KV stream was slow, from the sender's own socket: Linux's TCP_INFO.

A transfer that finished late either shared its path (the flow model's business) or
stalled: segments lost and resent, or worse a retransmission timeout, a silence of at
least rto_min during which the link may sit idle. TCP_INFO says which, per connection:
`total_retrans` (segments resent), `bytes_retrans`, and since Linux 6.7 `total_rto`
(timeouts), `total_rto_time` (ms spent recovering from them); older kernels return a
shorter struct and those fields are None. Offsets are those of struct tcp_info in
linux/tcp.h (a stable ABI: fields are only ever appended). `parse` is pure.
"""

from __future__ import annotations

import socket
import struct

TCP_INFO = getattr(socket, "TCP_INFO", 11)
READ_BYTES = 512  # more than any kernel's struct: the kernel says how much it filled
# name: (offset, struct format, scale to SI units)
FIELDS = {
    "rto_s": (8, "I", 1e-6),  # current retransmission timeout
    "rtt_s": (68, "I", 1e-6),  # smoothed RTT
    "cwnd_segs": (80, "I", 1),
    "retrans_segs": (100, "I", 1),  # total_retrans: segments resent over the connection
    "min_rtt_s": (148, "I", 1e-6),
    "data_segs_out": (156, "I", 1),
    "busy_s": (168, "Q", 1e-6),  # time spent sending data
    "rwnd_limited_s": (176, "Q", 1e-6),
    "sndbuf_limited_s": (184, "Q", 1e-6),
    "bytes_retrans": (208, "Q", 1),
    "timeouts": (240, "H", 1),  # total_rto (Linux 6.7+)
    "timeout_s": (244, "I", 1e-3),  # total_rto_time: ms in RTO recovery (Linux 6.7+)
}
# what a transfer row (one shard, one connection) keeps of the counters, over its shard
# alone; timeout_s in modelled seconds
RECORDED = ("retrans_segs", "timeouts", "timeout_s")
# counters of why a sender was or was not sending (wall seconds busy, limited by the
# receiver's window, by its own send buffer) and what it sent: a probe's, not a row's
LIMITS = ("busy_s", "rwnd_limited_s", "sndbuf_limited_s", "data_segs_out")
# and of the round trips, as they stood when the shard was sent (gauges, not counters:
# the smoothed one and the least the connection ever saw), in modelled seconds: how far
# the replica's round trips swing with the fabric's load, queues and datapath together
ROUND_TRIPS = ("rtt_s", "min_rtt_s")


def parse(buf: bytes) -> dict[str, float | None]:
    """struct tcp_info -> the FIELDS in SI units; None for a field this kernel lacks."""
    out: dict[str, float | None] = {}
    for name, (offset, fmt, scale) in FIELDS.items():
        if offset + struct.calcsize(fmt) <= len(buf):
            (raw,) = struct.unpack_from("<" + fmt, buf, offset)
            out[name] = raw * scale if scale != 1 else raw
        else:
            out[name] = None
    return out


def read(sock: socket.socket) -> dict[str, float | None] | None:
    """The connection's TCP_INFO now; None where the platform has none."""
    try:
        return parse(sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, READ_BYTES))
    except OSError:
        return None
