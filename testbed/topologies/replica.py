"""What the scaled replica does to the modelled fabric's bytes, buffers and timers: pure,
and the one place every packet engine (the emulation's tc, routes and workers, ns-3) takes
them from.

Every bandwidth and KV byte count is multiplied by the same scale factor, so transfer
times keep their modelled values; a switch's leaf queue holds QUEUE_S at its link rate, at
least a floor of full frames, so queueing delays keep their modelled values too. Both are
held in modelled time: an emulation at time dilation d runs its links d times slower in
wall time, so it keeps the same packets in each queue (QUEUE_S of the replica's modelled
rate, d x QUEUE_S of wall) and waits d times longer in wall time for a retransmission
timeout, and so builds the replica ns-3 builds. What it cannot stretch are the kernel's
constants that run in wall time (the delayed ACK's 40 ms, the tail loss probe's floor,
TSQ's millisecond of pacing): at dilation d they are 1/d of Linux's in modelled time
(`wall_timers_ms`), and ns-3's twin of such a run takes them so (ns3.twin_dilation).
"""

from __future__ import annotations

import math

from testbed.clock import Dilation
from testbed.model.tcp import WIRE_FRAME

QUEUE_S = 0.05  # leaf FIFO depth in seconds at the link rate: switch-like, not bufferbloat
# Queueing delay at emulated rates is 1/scale times a real switch's, so deep queues
# inflate RTTs to hundreds of ms and TCP's shares converge too slowly for the fluid
# model's instant max-min: with 100-packet floors the TP shards of one transfer took
# 1.4-1.5x as long as each other (median) and packets ran ~30% behind the flow model;
# with 16 (and cubic, not bbr) 1.3x and within ~10%, and a lone transfer still reaches
# ~96% of the rate (scenarios/validate.yaml, measured 2026-11-22).
MIN_QUEUE_PACKETS = 16
LINUX_RTO_MIN_MS = 200.0  # the kernel's TCP_RTO_MIN, which a route's rto_min replaces
# What the kernel times in wall time whatever a route says (Debian's kernels: HZ 250)
LINUX_DELAYED_ACK_MS = 40.0  # TCP_DELACK_MIN (= TCP_ATO_MIN)
LINUX_TLP_MIN_MS = 8.0  # TCP_TIMEOUT_MIN, 2 jiffies: the tail loss probe's floor
LINUX_TSQ_WINDOW_S = 2.0**-10  # sk_pacing_shift 10: what TSQ lets a socket queue of its pace


def scaled_bytes(modelled_bytes: float, scale: float) -> int:
    """What crosses the replica's wire for a modelled byte count (at least one byte)."""
    if modelled_bytes <= 0:
        return 0
    return max(1, round(modelled_bytes * scale))


def queue_packets(rate_bps: float, min_packets: int = MIN_QUEUE_PACKETS,
                  frame_bytes: int = WIRE_FRAME) -> int:
    """A leaf's depth: QUEUE_S at the link rate, at least `min_packets`, both in full-size
    frames, held as that many bytes' worth of `frame_bytes` frames (a smaller frame puts
    more packets, not more bytes, in a queue)."""
    full = max(min_packets, math.ceil(rate_bps * QUEUE_S / (1500 * 8)))
    return math.ceil(full * WIRE_FRAME / frame_bytes)


def leaf_packets(link, emu) -> int:
    """The depth of every class leaf on a fabric link's egress (either end), in packets of
    emu.frame_bytes: QUEUE_S at the replica's rate in modelled time, so the same at any
    time dilation (`emu`: the scenario's emulation section)."""
    return queue_packets(link.replica_bps, emu.queue_min_packets, emu.frame_bytes)


def rto_min_ms(emu) -> float:
    """The replica's minimum retransmission timeout in modelled ms: emulation.rto_min_ms,
    else Linux's 200 ms (the emulation sets it on every host route, x dilation in wall)."""
    return LINUX_RTO_MIN_MS if emu.rto_min_ms is None else emu.rto_min_ms


def wall_timers_ms(dilation: float) -> dict[str, float]:
    """The kernel's wall-time constants in modelled ms on an emulation at `dilation`
    (no route or socket option lengthens them: 40 wall ms of delayed ACK are 40/d)."""
    spans = Dilation(dilation)
    return {"delayed_ack": spans.modelled(LINUX_DELAYED_ACK_MS),
            "tlp_min": spans.modelled(LINUX_TLP_MIN_MS),
            "tsq_window": spans.modelled(1e3 * LINUX_TSQ_WINDOW_S)}


def replica_record(egress: dict[str, set[tuple[float, int]]], rto_min: float,
                   timers: dict[str, float], frame_bytes: int, queue_limit: str) -> dict:
    """What a packet engine applied, in modelled time, in one shape for every engine (the
    emulation's qdiscs and routes read back, ns-3's devices and sockets): per kind of
    egress ("host:1" a host's NIC, "switch:T" a switch port on a tier-T link) the distinct
    (rate in bits per modelled second, leaf depth in packets) pairs; the timers in ms."""
    return {"egress": {k: sorted([round(r), int(n)] for r, n in v)
                       for k, v in sorted(egress.items())},
            "rto_min_ms": round(rto_min, 3),
            **{f"{k}_ms": round(v, 3) for k, v in sorted(timers.items())},
            "frame_bytes": frame_bytes, "queue_limit": queue_limit}


def egress_kind(sender_is_host: bool, tier: int) -> str:
    return f"host:{tier}" if sender_is_host else f"switch:{tier}"


def background_partner(spec, instance: str, tier: int) -> str | None:
    """Where an instance's background stream at `tier` goes: the next instance after it
    (cyclically, by index) at exactly that tier."""
    names = [i.name for i in spec.instances]
    k = names.index(instance)
    for step in range(1, len(names)):
        other = names[(k + step) % len(names)]
        if spec.tier(instance, other) == tier:
            return other
    return None
