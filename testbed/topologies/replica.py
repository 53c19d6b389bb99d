"""What the scaled replica does to the modelled fabric's bytes and buffers: pure, and the
one place every packet engine (the emulation's tc and workers, ns-3) takes them from.

Every bandwidth and KV byte count is multiplied by the same scale factor, so transfer
times keep their modelled values; a switch's leaf queue holds QUEUE_S at its link rate, at
least a floor of full frames, so queueing delays keep their modelled values too.
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
