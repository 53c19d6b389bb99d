"""What the fluid network is made of: directed links with their byte counters, and
flows with their rates, windows and completion bookkeeping."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from testbed.control.network_seam import Hop

MAX_BACKGROUND = 0.95  # keep some capacity so fluid rates never reach zero
SATURATED = 1 - 1e-9  # a link this full counts as saturated (float rounding)


@dataclass(slots=True)
class LinkState:
    hop: Hop
    tier: int
    capacity: float  # bytes/s, the configured line rate
    background: float = 0.0  # offered fraction of capacity used by non-KV traffic
    flows: set[int] = field(default_factory=set)
    down: bool = False  # a failed link carries nothing until it comes back
    kv_rate: float = 0.0  # sum of KV flow rates now
    kv_bytes: float = 0.0  # integral of kv_rate up to `t0`
    bg_bytes: float = 0.0  # integral of background rate up to `t0`
    index: int = 0  # position in FluidNetwork.link_list
    t0: float = 0.0
    # what KV flows may use (none while down) and the rate that counts as full; read on
    # every re-sharing step, so kept, and refreshed when `down` or `background` change
    kv_capacity: float = field(init=False, default=0.0)
    kv_full: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        """After `down` or `background` changed."""
        self.kv_capacity = 0.0 if self.down else self.capacity * (1.0 - self.background)
        self.kv_full = self.kv_capacity * SATURATED

    def settle(self, now: float) -> None:
        """Integrate the byte counters up to `now` (before a rate changes, or to read)."""
        dt = now - self.t0
        if dt > 0:
            if self.kv_rate:
                self.kv_bytes += self.kv_rate * dt
            if self.background:
                self.bg_bytes += self.background * self.capacity * dt
            self.t0 = now


@dataclass(slots=True)
class Flow:
    flow_id: int
    path: list[Hop]
    size: float
    remaining: float  # bytes left as of `t0` (FluidNetwork.advance brings all to now)
    start: float
    tag: object = None  # owner's handle (a transfer shard)
    level: int = 0  # strict-priority class: 0 is served first (MFS and its baselines)
    cap: float | None = None  # rate limit in bytes/s (Karuna's minimum-rate deadline flows)
    rate: float = 0.0
    end: float | None = None
    weight: float = 1.0  # share of a bottleneck relative to other flows (RTT weighting)
    rtt: float = 0.0  # base round trip of its path (TCP model only)
    window_cap: float | None = None  # slow-start window / rtt while it binds
    ramp_at: float | None = None  # when the window next doubles
    rounds: int = -1  # slow-start round trips done (-1: handshake)
    links: tuple[int, ...] = ()  # the path as link indices
    t0: float = 0.0
    version: int = 0  # bumped at every rate change: older completion entries are stale
    due: float | None = None  # its entry in the completion heap (when its bytes are out)
    alone_share: float = 1.0  # of its path's rate, alone with its own transfer's streams
    group: object = None  # its transfer, whose streams share unequally (tcp.shard_share)
    shard_k: int = 0  # its stream's index in that transfer
    shard_factor: float = 1.0  # the tcp.shard_share in its weight now
    bottleneck: int = -1  # the link it was last found held by (checked first next time)

    def effective_cap(self) -> float | None:
        cap, window = self.cap, self.window_cap
        if cap is None:
            return window
        return cap if window is None else min(cap, window)


def byte_columns(links: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """The KV and background bytes each link (anything with kv_bytes and bg_bytes) has
    carried, as two columns in the links' order."""
    return (np.fromiter((lk.kv_bytes for lk in links), float, len(links)),
            np.fromiter((lk.bg_bytes for lk in links), float, len(links)))
