"""What TCP does to a transfer that a fluid rate does not (pure; modelled cluster units).

A fluid flow sends at its max-min share from its first instant to its last byte. A TCP
stream first spends a round trip on its handshake, then sends a window that starts at
`init_cwnd` segments and doubles every round trip (slow start) until it can fill its
share, and is complete only when the last byte's acknowledgement is back, one more round
trip. These are the same three terms flow-level simulators add: SimGrid's
network/TCP_gamma bounds a flow's rate by window / RTT and its latency factor charges
start-up per message (Velho et al., "On the validity of flow-level TCP network
models for grid and cloud simulations", TOMACS 2013); m3 and Parsimon report flow
completion as a slowdown over size / rate + base RTT (Li et al., "m3", SIGCOMM 2024;
Zhao et al., "Parsimon", NSDI 2023). Here the window cap is applied inside the max-min
sharing itself (testbed/flowsim/network.py), so the start-up is right under contention.

Every quantity is in the modelled cluster's units. The emulation is a scaled replica:
a wire segment of `wire_mss` bytes stands for wire_mss / scale modelled bytes, and one
wire round trip of R seconds stands for R / time_dilation modelled seconds. So the same
model, fed the emulation's equivalents (`emulation_equivalent`), predicts the packets,
and fed the cluster's own (jumbo frames, microsecond RTTs) predicts the cluster; where
the two disagree by more than a tolerance, the packets show an artifact of scaling
(`validity_floor`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.clock import Dilation

WIRE_MSS = 1448  # bytes of payload in a 1500-byte Ethernet frame with TCP timestamps
WIRE_FRAME = 1514  # bytes a data segment occupies on an emulated link (Ethernet header)
SEGMENT_OVERHEAD = WIRE_FRAME - WIRE_MSS  # Ethernet, IPv4 and TCP headers with timestamps
MIN_FRAME = 256  # the smallest replica frame a scenario may ask for (emulation.frame_bytes)
LINUX_INIT_CWND = 10  # segments (RFC 6928)
MAX_SHARD_SPREAD = 0.9  # the slowest shard keeps a tenth of an equal share at least
MAX_CONTENTION_IDLE = 0.9  # a contended stream's time stretches 10x at most


@dataclass(frozen=True)
class TcpParams:
    mss_bytes: float  # modelled bytes per segment
    init_cwnd: float = LINUX_INIT_CWND  # segments in the first window
    handshake_rtts: float = 1.0  # round trips before the first data byte
    tail_rtts: float = 1.0  # round trips from the last byte sent to the end seen by the sender
    hop_delay_s: float = 0.0  # per switch hop and direction: processing, not propagation
    serialisation: float = 1.0  # share of a segment's store-and-forward time charged per hop
    shard_spread: float = 0.0  # unequal shares among one transfer's shard streams (shard_share)
    contention_idle: float = 0.0  # share of a contended link's time lost (contention_delay)
    seniority_s: float = 0.0  # head start that doubles a stream's share (0: none; seniority)
    join_stall_s: float = 0.0  # a newcomer's silence on a busy path (0: none; join_stall)

    def __post_init__(self) -> None:
        if not (self.mss_bytes > 0 and self.init_cwnd > 0):
            raise ValueError("mss_bytes and init_cwnd must be positive")
        if not 0.0 <= self.serialisation <= 1.0:
            raise ValueError("serialisation is a share: 0..1")
        if not 0.0 <= self.shard_spread < 1.0:
            raise ValueError("shard_spread must be in [0, 1)")
        if not 0.0 <= self.contention_idle <= MAX_CONTENTION_IDLE:
            raise ValueError(f"contention_idle must be in [0, {MAX_CONTENTION_IDLE}]")
        if not self.seniority_s >= 0.0:
            raise ValueError("seniority_s must be >= 0")
        if not self.join_stall_s >= 0.0:
            raise ValueError("join_stall_s must be >= 0")


def path_rtt(tier_latency_s: float, hop_rates: list[float], params: TcpParams,
             stream_bytes: float | None = None) -> float:
    """Base round trip of a path: the tier's one-way latency both ways, a data segment
    stored and forwarded at every hop (ACKs are small), and per-hop processing both ways.
    The segment is a full one, or the whole stream where it is smaller (`stream_bytes`: a
    shard of a few hundred bytes is stored and forwarded as that, not as a full frame). A
    token-bucket shaper (HTB's burst) lets a lone segment through an idle link at once, so
    the emulation charges only a share of the store-and-forward time (`serialisation`,
    fitted by testbed calibrate); a real switch, and ns-3's, charges all of it."""
    segment = params.mss_bytes if stream_bytes is None else min(params.mss_bytes, stream_bytes)
    serialise = params.serialisation * sum(segment / r for r in hop_rates if r > 0)
    return 2.0 * tier_latency_s + serialise + 2.0 * len(hop_rates) * params.hop_delay_s


def shard_share(k: int, n: int, spread: float) -> float:
    """Relative share of shard `k` of `n` parallel streams of one transfer: from 1 + spread
    (the first) down to 1 - spread (the last), linearly; they sum to n.

    Parallel TCP streams through one bottleneck do not split it equally over a transfer's
    life: whichever stream loses packets first backs off and the others take its share
    (the short-term unfairness of loss-based congestion control; Hacker, Athey and Noble,
    "The end-to-end performance effects of parallel TCP sockets on a lossy wide-area
    network", IPDPS 2002). A fluid model with equal shares ends them together. With these
    weights, alone on a bottleneck, the slowest ends when equal shares would (the link stays
    full) and the fastest (1 + spread) times sooner: the spread is fitted on lone transfers,
    every shard's end against lone_shard_ends (testbed calibrate). `n` counts the
    transfer's streams still sending (the flow model ranks them again when one is done):
    the inequality is among one transfer's streams, while against other transfers they
    weigh together as many streams as they are, as TCP is fair per stream. Under
    contention the difference matters: once the fast shards are done the transfer holds
    fewer streams at the bottleneck, so its last shard ends later than equal shares would
    end the whole transfer."""
    if n <= 1 or spread <= 0:
        return 1.0
    return 1.0 + spread * (1.0 - 2.0 * k / (n - 1))


def lone_shard_ends(n: int, spread: float) -> list[float]:
    """When each of a transfer's n equal streams ends, alone on a bottleneck, as shares
    of the transfer's time (earliest first; the last is 1): the streams still sending
    share the link by shard_share of their order among themselves, so the link stays
    full and the first ends 1 / (1 + spread) of the way. The whole profile, not only
    the first, is what the spread is fitted to (testbed calibrate)."""
    left = [1.0] * n  # bytes left, each stream's share of the transfer times n
    t, ends = 0.0, []
    while left:
        m = len(left)
        rates = [shard_share(k, m, spread) / m for k in range(m)]  # of the link, sum 1
        dt = min(b / r for b, r in zip(left, rates, strict=True))
        t += dt
        left = [b - r * dt for b, r in zip(left, rates, strict=True)]
        while left and left[0] <= 1e-12 * n:  # the first in order ends first
            left.pop(0)
            ends.append(t / n)
    return ends


def contention_delay(elapsed: float, alone: float, idle: float) -> float:
    """Extra time a stream takes beyond its fluid end for the competition it met.

    Loss-based streams that share a bottleneck lose packets together, and a stream whose
    window is a few packets cannot recover by fast retransmit: it waits for a timeout
    while the others may not fill the gap (Morris, "TCP behavior with many flows", ICNP
    1997); a fluid link never idles while it has demand. The part of a stream's life
    spent beyond what it would take alone (`elapsed` - `alone`: the time it lost to
    competitors) is stretched as if its bottleneck kept only (1 - idle) of its rate busy.
    Applied to the stream's end, not to the link's rate: an FCT slowdown in the spirit of
    Parsimon (Zhao et al., NSDI 2023), which leaves the others' rates alone, so a
    congested fabric cannot run away with it. `idle` is fitted on the calibration's
    competing probes (testbed calibrate); a lone transfer is already in the calibrated
    capacity and slow start, so it gets nothing."""
    return idle / (1.0 - idle) * max(0.0, elapsed - alone)


MAX_SENIORITY_DOUBLINGS = 800.0  # 2^800 < 1e241: weights stay finite, ratios exact


def seniority(head_start: float, seniority_s: float) -> float:
    """Weight of a stream that started `head_start` seconds before a reference one, in
    the max-min sharing of a link they both cross: twice as much per `seniority_s`.

    Streams that meet on a short-queued bottleneck do not split it equally from the
    instant they meet: the one already sending keeps most of it. The calibration's
    spaced probes show it (the first arrival ends sooner than an equal share lets it,
    the last later); on the replica the newcomer's slow start overflows the short queue
    and it waits out retransmission timeouts. Relative weights by start time keep
    max-min's other properties (work conserving, streams started together equal). 0
    turns it off, the default: fitted on the probes, the value makes workloads worse
    (docs/log/validation-notebook.md, "Seniority")."""
    if not seniority_s:
        return 1.0
    return 2.0 ** max(-MAX_SENIORITY_DOUBLINGS,
                      min(MAX_SENIORITY_DOUBLINGS, head_start / seniority_s))


def join_stall(stream_bytes: float, path_busy: bool, params: TcpParams) -> float:
    """Seconds a stream that joins a busy path sends nothing after its handshake.

    On a short-queued bottleneck that other streams keep full, a newcomer's slow start
    overflows the queue as soon as its window doubles: its burst is lost, and with a
    window of a few segments it cannot recover by fast retransmit, so it waits out
    retransmission timeouts while the incumbents keep the link (the calibration's staggered
    probes: the second of two transfers met 2-4 timeouts, the first none;
    docs/log/validation-notebook.md, "Seniority"). A stream whose bytes fit in its first window never
    doubles it and loses nothing: it only waits its turn, which max-min sharing gives it.
    Streams that start together (a transfer's shards, transfers arriving at one instant)
    find no incumbent. `path_busy`: a link of its path was saturated by others when it
    came. `join_stall_s` is fitted on the staggered probes (testbed calibrate); 0, the
    default, turns it off."""
    if not params.join_stall_s or not path_busy:
        return 0.0
    if stream_bytes <= params.init_cwnd * params.mss_bytes:
        return 0.0
    return params.join_stall_s


def window_rate(rounds: int, rtt_s: float, params: TcpParams) -> float:
    """Rate a slow-starting sender can reach in its `rounds`-th round trip (0-based)."""
    return params.init_cwnd * params.mss_bytes * (2.0 ** rounds) / rtt_s


def ramp_rounds(rate: float, rtt_s: float, params: TcpParams) -> int:
    """Round trips of slow start before the window can fill `rate`."""
    first = window_rate(0, rtt_s, params)
    return 0 if first >= rate else math.ceil(math.log2(rate / first))


def lone_transfer_time(size: float, rate: float, rtt_s: float, params: TcpParams) -> float:
    """Completion time of one stream alone at a bottleneck `rate` (bytes/s): handshake,
    slow start up to the rate, the rest at the rate, then the tail. The closed form of
    what the fluid network does with window caps for a lone flow."""
    if size <= 0:
        return 0.0
    t = params.handshake_rtts * rtt_s
    left = size
    for k in range(ramp_rounds(rate, rtt_s, params)):
        window = window_rate(k, rtt_s, params) * rtt_s  # bytes this round
        if window >= left:
            return t + left / window_rate(k, rtt_s, params) + params.tail_rtts * rtt_s
        left -= window
        t += rtt_s
    return t + left / rate + params.tail_rtts * rtt_s


def startup_excess(size: float, rate: float, rtt_s: float, params: TcpParams) -> float:
    """(TCP time - fluid time) / fluid time for a lone transfer."""
    fluid = size / rate
    return lone_transfer_time(size, rate, rtt_s, params) / fluid - 1.0


def wire_mss(frame_bytes: int = WIRE_FRAME) -> int:
    """Payload bytes of a full segment whose frame is `frame_bytes` on the wire."""
    if frame_bytes <= SEGMENT_OVERHEAD:
        raise ValueError(f"a frame of {frame_bytes} bytes has no room for a payload")
    return frame_bytes - SEGMENT_OVERHEAD


def payload_share(frame_bytes: int = WIRE_FRAME, header_bytes: int = SEGMENT_OVERHEAD) -> float:
    """Share of a full data segment's bytes on the wire that is payload, where a segment
    carries wire_mss(frame_bytes) of payload in `header_bytes` of headers (the emulation's
    Ethernet frame: 66; ns-3's point-to-point: 42). No link delivers KV bytes faster than
    its rate times this."""
    mss = wire_mss(frame_bytes)
    return mss / (mss + header_bytes)


def emulation_equivalent(scale: float, time_dilation: float, wire_hop_delay_s: float = 0.0,
                         init_cwnd: float = LINUX_INIT_CWND,
                         serialisation: float = 1.0,
                         frame_bytes: int = WIRE_FRAME) -> TcpParams:
    """The TCP parameters, in modelled units, that the emulated replica actually has.

    A wire segment carries wire_mss(frame) bytes but occupies `frame_bytes` of a link's
    rate; modelled bytes are wire bytes / scale, so a segment is frame / scale modelled
    bytes' time on a link and a window of init_cwnd segments carries init_cwnd x mss /
    frame of them. Wall delays shrink by the dilation."""
    if scale <= 0 or time_dilation <= 0:
        raise ValueError("scale and time_dilation must be positive")
    return TcpParams(mss_bytes=frame_bytes / scale,
                     init_cwnd=init_cwnd * wire_mss(frame_bytes) / frame_bytes,
                     hop_delay_s=Dilation(time_dilation).modelled(wire_hop_delay_s),
                     serialisation=serialisation)


def validity_floor(rate: float, rtt_emulated: float, emulated: TcpParams, rtt_cluster: float,
                   cluster: TcpParams, tolerance: float) -> float:
    """Smallest transfer (modelled bytes) whose start-up excess on the emulated replica
    exceeds the cluster's by at most `tolerance` of its fluid time. Below it, the time
    packets take is mostly an artifact of scaling (few, huge segments and a long RTT in
    modelled time) that the modelled cluster would not have. The excess difference falls
    with size, so bisection finds the crossing."""
    def gap(size: float) -> float:
        return (startup_excess(size, rate, rtt_emulated, emulated)
                - startup_excess(size, rate, rtt_cluster, cluster))

    lo, hi = 1.0, 1.0
    while gap(hi) > tolerance:
        lo, hi = hi, hi * 2.0
        if hi > 1e16:
            raise ValueError("no transfer size is valid at this tolerance")
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        if gap(mid) > tolerance:
            lo = mid
        else:
            hi = mid
    return hi


def segments(size_modelled: float, scale: float, frame_bytes: int = WIRE_FRAME) -> int:
    """Wire segments a shard of `size_modelled` bytes becomes on the replica."""
    return max(1, math.ceil(size_modelled * scale / wire_mss(frame_bytes)))
