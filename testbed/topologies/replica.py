"""What the scaled replica does to the modelled fabric's bytes, buffers and timers: pure,
and the one place every packet engine (the emulation's tc, routes and workers, ns-3) takes
them from.

Every bandwidth and KV byte count is multiplied by the same scale factor, so transfer
times keep their modelled values; a switch's leaf queue holds QUEUE_S at its link rate, at
least a floor of full frames, so queueing delays keep their modelled values too. Both are
held in modelled time: an emulation at time dilation d runs its links d times slower in
wall time, so it keeps the same packets in each queue (QUEUE_S of the replica's modelled
rate, d x QUEUE_S of wall) and waits d times longer in wall time for a retransmission
timeout, and so builds the replica ns-3 builds. The one timer it cannot stretch is the
kernel's delayed ACK (40 ms of wall time whatever the route says): at dilation d it is
40/d modelled ms (`delayed_ack_ms`).
"""

from __future__ import annotations

import math

from testbed.model.tcp import WIRE_FRAME

QUEUE_S = 0.05  # leaf FIFO depth in seconds at the link rate: switch-like, not bufferbloat
# Queueing delay at emulated rates is 1/scale times a real switch's, so deep queues
# inflate RTTs to hundreds of ms and TCP's shares converge too slowly for the fluid
# model's instant max-min: with 100-packet floors the TP shards of one transfer took
# 1.4-1.5x as long as each other (median) and packets ran ~30% behind the flow model;
# with 16 (and cubic, not bbr) 1.3x and within ~10%, and a lone transfer still reaches
# ~96% of the rate (scenarios/validate.yaml, measured 2026-11-22).
MIN_QUEUE_PACKETS = 16
LINUX_RTO_MIN_MS = 200.0  # the kernel's TCP_RTO_MIN
LINUX_DELAYED_ACK_MS = 40.0  # the kernel's TCP_DELACK_MIN (= TCP_ATO_MIN): no knob raises it


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


def delayed_ack_ms(dilation: float) -> float:
    """Linux's delayed-ACK timeout in modelled ms on an emulation at `dilation`: its wall
    40 ms, which no route or socket option lengthens, is 40/d modelled ms."""
    return LINUX_DELAYED_ACK_MS / dilation


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
