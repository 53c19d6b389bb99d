"""The network seam: what the flow simulator (testbed/flowsim/simulator.py and its
mixins) does to the network its transfers run on, whichever engine that network is.

`SimulatedNetwork` is implemented by the fluid network (flowsim/network.py FluidNetwork,
with its subclasses NativeFluidNetwork and ModelNetwork) and by ns-3's packets
(ns3sim/packet_network.py PacketNetwork); `FluidBackground` adds the fluid networks' way
of offering background traffic (a fraction per link; ns-3's run sends paced streams
instead: PacketNetwork.set_stream, which only ns3sim calls). tests/test_seams.py holds
every implementation to these signatures.

The emulation has no such object: its fabric is real (emulation/net.py builds it and
offers a run's processes their hosts), a link fault is the router turning interfaces
down (workers/router/failures.py), congestion is the SDN controller's poller (sdn/), and
link bytes are the switches' tc counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np

Hop = tuple[str, str]  # a directed link: (sender, receiver)


class NetworkFlow(Protocol):
    """What the simulator reads of a flow (flowsim/links.py Flow, in both engines), and
    sets: `level` and `cap` (MFS and its baselines, then `recompute`)."""

    flow_id: int
    path: list[Hop]
    size: float
    remaining: float  # bytes left as of the network's last `advance`
    start: float
    tag: object  # the caller's handle (the simulator's: request state, shards or REUSE)
    level: int
    cap: float | None


class NetworkLink(Protocol):
    """What the simulator reads of a directed link (its samples' columns, its tier)."""

    hop: Hop
    tier: int
    capacity: float  # bytes/s


class SimulatedNetwork(Protocol):
    """A network the flow simulator moves its transfers and KV-reuse fetches on."""

    flows: dict[int, NetworkFlow]  # the flows on the network now, by id
    links: dict[Hop, NetworkLink]
    link_list: list[NetworkLink]  # the order of link_bytes() and of links.csv
    level_bytes: dict[int, float]  # KV bytes delivered per priority level

    def add_flow(self, path: list[Hop], size: float, now: float, tag: object = None,
                 level: int = 0, shard: tuple[int, int] = (0, 1), share: bool = True,
                 streams: int = 1, group: object = None) -> NetworkFlow:
        """A flow of `size` bytes on `path` from `now`: shard k of a transfer's n
        (`group`), `streams` identical ones merged where the engine can; `share=False`
        leaves the re-sharing to the caller's `recompute`."""

    def remove_flows(self, now: float,
                     doomed: Callable[[NetworkFlow], bool]) -> list[NetworkFlow]:
        """Take the `doomed` flows out (their receiver died), unfinished."""

    def recompute(self, touched: Iterable[Hop] | None = None,
                  changed: Iterable[NetworkFlow] | None = None) -> None:
        """Re-share after flows arrived on `touched` links (`changed`: those flows), or
        after levels and caps changed (no arguments: anything may have)."""

    def advance(self, now: float) -> None:
        """Bring every flow's `remaining` and every link's byte counters to `now`."""

    def pop_finished(self, now: float) -> list[NetworkFlow]:
        """The flows that ended by `now`, taken off the network."""

    def next_completion(self) -> float | None:
        """When the next flow may end at today's rates (None: nothing to wait for, or the
        engine reports ends itself)."""

    def link_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """KV and background bytes each link (link_list's order) has carried up to the
        last `advance`."""

    def transfer_paths(self, src: str, dst: str, mode: str, flows: int) -> list[list[Hop]]:
        """A path for each of a transfer's `flows` under ECMP mode `mode`."""

    def set_link(self, a: str, b: str, up: bool, now: float) -> int:
        """Link a-b fails or returns (both directions); how many flows it moved to another
        path (0 where the engine's own routing moves them)."""

    def tier_congestion(self) -> dict[int, float]:
        """The oracle's c_tier: background (non-KV) utilisation per tier."""


class FluidBackground(SimulatedNetwork, Protocol):
    """A network whose background is an offered fraction of each link's capacity."""

    def set_background(self, fractions: dict[Hop, float], now: float) -> None:
        """From `now` on, link hop carries fractions[hop] of its capacity in background."""
