"""Fluid network: directed links, ECMP path choice per flow, max-min fair rates.

Rates are recomputed by progressive filling at every flow arrival and completion, as
the paper's simulator does. With a TCP model (testbed/model/tcp.py) a flow also spends
its handshake at rate zero, is capped by its slow-start window (doubling every round trip
until the window stops binding), ends a tail of round trips after its last byte, and
shares bandwidth in proportion to rtt^-rtt_exponent (SimGrid's RTT-weighted max-min;
0 = equal shares, Reno's classic bias is 1); a transfer's parallel shard streams share
unequally (tcp.shard_share), so it ends with its slowest shard. Background traffic is a
per-link offered fraction that removes (1 - f) of a link's capacity from KV flows (the
paper's mean-field model); the oracle's congestion is the mean background fraction of a
tier's links, never KV.
"""

from __future__ import annotations

import heapq
import random
import zlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from testbed.model import tcp as tcpmodel
from testbed.model.cost import gbps_to_bytes_per_s
from testbed.topologies.fattree import FatTreeSpec
from testbed.topologies.routing import PairPaths

MAX_BACKGROUND = 0.95  # keep some capacity so fluid rates never reach zero

Hop = tuple[str, str]


@dataclass
class LinkState:
    hop: Hop
    tier: int
    capacity: float  # bytes/s, the configured line rate
    background: float = 0.0  # offered fraction of capacity used by non-KV traffic
    flows: set[int] = field(default_factory=set)
    down: bool = False  # a failed link carries nothing until it comes back
    kv_rate: float = 0.0  # sum of KV flow rates now
    kv_bytes: float = 0.0  # integral of kv_rate
    bg_bytes: float = 0.0  # integral of background rate

    @property
    def kv_capacity(self) -> float:
        return 0.0 if self.down else self.capacity * (1.0 - self.background)


@dataclass
class Flow:
    flow_id: int
    path: list[Hop]
    size: float
    remaining: float
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

    def effective_cap(self) -> float | None:
        caps = [c for c in (self.cap, self.window_cap) if c is not None]
        return min(caps) if caps else None


class FluidNetwork:
    """Links from a FatTreeSpec; flows share them max-min fairly."""

    def __init__(self, spec: FatTreeSpec, rng: random.Random | None,
                 capacity_factor: dict[int, float] | None = None,
                 tcp: tcpmodel.TcpParams | None = None, rtt_exponent: float = 0.0):
        self.spec = spec
        self.tcp = tcp
        self.rtt_exponent = rtt_exponent
        self.draining: dict[int, tuple[float, Flow]] = {}  # bytes sent, end not yet seen
        self._latency_s = {t: us * 1e-6 for t, us in spec.tier_latency_us.items()}
        self.rng = rng
        self.links: dict[Hop, LinkState] = {}
        factor = capacity_factor or {}
        for link in spec.links:
            # a calibration (testbed calibrate) scales what a tier's links really deliver
            cap = gbps_to_bytes_per_s(link.capacity_gbps) * factor.get(link.tier, 1.0)
            for hop in ((link.a, link.b), (link.b, link.a)):
                self.links[hop] = LinkState(hop, link.tier, cap)
        self.flows: dict[int, Flow] = {}
        self.level_bytes: dict[int, float] = {}  # KV bytes delivered per priority level
        self._next_id = 0
        self.last_update = 0.0
        self._path_cache: dict[tuple[str, str], list[list[Hop]]] = {}
        self._pairs = PairPaths(spec)

    # -- paths -----------------------------------------------------------------------
    def _all_paths(self, src: str, dst: str) -> list[list[Hop]]:
        paths = self._path_cache.get((src, dst))
        if paths is None:
            paths = self._path_cache[(src, dst)] = self.spec.paths(src, dst)
        return paths

    def live_paths(self, src: str, dst: str) -> list[list[Hop]]:
        """Equal-cost paths with no failed link; all of them if none is whole (the
        flows then wait on a dead link until it comes back: a partition)."""
        paths = self._all_paths(src, dst)
        live = [p for p in paths if not any(self.links[h].down for h in p)]
        return live or paths

    def ecmp_path(self, src: str, dst: str) -> list[Hop]:
        """Uniform random choice among equal-cost live paths, one per flow (seeded)."""
        paths = self.live_paths(src, dst)
        return paths[self.rng.randrange(len(paths))] if len(paths) > 1 else paths[0]

    def pair_path(self, src: str, dst: str) -> list[Hop]:
        """Per-pair ECMP: the path the emulated fabric's controller pins for this pair."""
        path = self._pairs.path(src, dst)
        if any(self.links[h].down for h in path):  # the controller re-hashes on live paths
            live = self.live_paths(src, dst)
            path = live[zlib.crc32(f"{src}>{dst}".encode()) % len(live)]
        return path

    def transfer_paths(self, src: str, dst: str, mode: str, flows: int) -> list[list[Hop]]:
        """One path per flow of a transfer under `network.ecmp` (topologies/routing.py
        says what each mode means)."""
        if mode == "per-pair":
            return [self.pair_path(src, dst)] * flows
        if mode == "per-flow":
            return [self.ecmp_path(src, dst) for _ in range(flows)]
        return [self.ecmp_path(src, dst)] * flows

    # -- failures --------------------------------------------------------------------
    def set_link(self, a: str, b: str, up: bool, now: float) -> int:
        """A link fails or returns; flows on a failed link move to a live equal-cost
        path of theirs where one exists. Returns how many flows moved."""
        self.advance(now)
        for hop in ((a, b), (b, a)):
            self.links[hop].down = not up
        moved = 0
        if not up:
            for flow in self.flows.values():
                if any(self.links[h].down for h in flow.path):
                    src, dst = flow.path[0][0], flow.path[-1][1]
                    live = [p for p in self.live_paths(src, dst)
                            if not any(self.links[h].down for h in p)]
                    if live:
                        new = live[flow.flow_id % len(live)]
                        for hop in flow.path:
                            self.links[hop].flows.discard(flow.flow_id)
                        flow.path = new
                        for hop in new:
                            self.links[hop].flows.add(flow.flow_id)
                        moved += 1
        self.recompute()
        return moved

    # -- background ------------------------------------------------------------------
    def set_background(self, fractions: dict[Hop, float], now: float) -> None:
        self.advance(now)
        for hop, f in fractions.items():
            self.links[hop].background = min(max(f, 0.0), MAX_BACKGROUND)
        self.recompute()

    def tier_congestion(self) -> dict[int, float]:
        """c_tier: mean background (non-KV) utilisation over the tier's links."""
        sums: dict[int, list[float]] = defaultdict(list)
        for link in self.links.values():
            sums[link.tier].append(link.background)
        return {tier: min(sum(v) / len(v), 0.99) for tier, v in sums.items()}

    # -- flows -----------------------------------------------------------------------
    def add_flow(self, path: list[Hop], size: float, now: float, tag: object = None,
                 level: int = 0, shard: tuple[int, int] = (0, 1), share: bool = True) -> Flow:
        """`shard` (k, n): this flow is stream k of a transfer's n parallel ones (under the
        TCP model they share unequally: tcp.shard_share). `share=False` leaves the
        re-sharing to the caller (flows arriving together: one recompute for all)."""
        self.advance(now)
        flow = Flow(self._next_id, path, size, size, now, tag, level)
        self._next_id += 1
        if self.tcp is not None:
            flow.rtt = self.path_rtt(path)
            flow.window_cap = 0.0  # the handshake
            flow.ramp_at = now + self.tcp.handshake_rtts * flow.rtt
            if self.rtt_exponent:
                flow.weight = flow.rtt ** -self.rtt_exponent
            flow.weight *= tcpmodel.shard_share(*shard, self.tcp.shard_spread)
        self.flows[flow.flow_id] = flow
        for hop in path:
            self.links[hop].flows.add(flow.flow_id)
        if share:
            self.recompute(path)
        return flow

    def path_rtt(self, path: list[Hop]) -> float:
        links = [self.links[h] for h in path]
        tier = max((link.tier for link in links), default=0)
        return tcpmodel.path_rtt(self._latency_s.get(tier, 0.0),
                                 [link.capacity for link in links], self.tcp)

    def remove_flows(self, now: float, doomed) -> list[Flow]:
        """Take flows out (their receiver died) without finishing them."""
        self.advance(now)
        for fid in [fid for fid, (_, f) in self.draining.items() if doomed(f)]:
            del self.draining[fid]
        gone = [f for f in self.flows.values() if doomed(f)]
        self._detach(gone)
        return gone

    def _detach(self, flows: list[Flow]) -> None:
        """Take flows off the network and its links, and re-share the bandwidth."""
        for flow in flows:
            del self.flows[flow.flow_id]
            for hop in flow.path:
                self.links[hop].flows.discard(flow.flow_id)
        if flows:
            self.recompute({hop for flow in flows for hop in flow.path})

    def advance(self, now: float) -> None:
        """Move every flow forward at its current rate to time `now`."""
        dt = now - self.last_update
        if dt <= 0:
            return
        for flow in self.flows.values():
            moved = min(flow.remaining, flow.rate * dt)
            flow.remaining -= moved
            if moved:
                self.level_bytes[flow.level] = self.level_bytes.get(flow.level, 0.0) + moved
        for link in self.links.values():
            if link.kv_rate:
                link.kv_bytes += link.kv_rate * dt
            if link.background:
                link.bg_bytes += link.background * link.capacity * dt
        self.last_update = now

    def pop_finished(self, now: float) -> list[Flow]:
        """Remove flows whose bytes are delivered, up to float rounding (1 ns or 1 ppb).
        Under the TCP model a delivered flow leaves the links at once but is finished
        only after its tail; due slow-start steps are applied here too."""
        self.advance(now)
        if self.tcp is not None:
            self._ramp(now)
        done = [
            f for f in self.flows.values()
            if f.remaining <= f.size * 1e-9 or (f.rate > 0 and f.remaining / f.rate <= 1e-9)
        ]
        for flow in done:
            flow.remaining = 0.0
            flow.end = now
        self._detach(done)
        if self.tcp is None:
            return done
        for flow in done:
            self.draining[flow.flow_id] = (now + self.tcp.tail_rtts * flow.rtt, flow)
        ended = [f for t, f in self.draining.values() if t <= now + 1e-12]
        for flow in ended:
            flow.end = now
            del self.draining[flow.flow_id]
        return ended

    def _ramp(self, now: float) -> None:
        """Slow start: every due window doubles; a window that no longer binds (the flow
        gets less than it allows) leaves slow start for good, as TCP does at its first loss."""
        changed: set[Hop] = set()
        for flow in self.flows.values():
            if flow.ramp_at is None:
                continue
            if flow.window_cap is not None and 0.0 < flow.rate < flow.window_cap * (1 - 1e-9):
                flow.window_cap = flow.ramp_at = None
                changed.update(flow.path)
                continue
            while flow.ramp_at is not None and flow.ramp_at <= now + 1e-12:
                flow.rounds += 1  # (several rounds at once only if the caller skipped events)
                flow.window_cap = tcpmodel.window_rate(flow.rounds, flow.rtt, self.tcp)
                flow.ramp_at += flow.rtt
                if flow.window_cap >= min(self.links[h].capacity for h in flow.path):
                    flow.window_cap = flow.ramp_at = None
                changed.update(flow.path)
        if changed:
            self.recompute(changed)

    def next_completion(self) -> float | None:
        """Time of the next change at current rates: a flow finishing (or, under the TCP
        model, its tail ending or its window doubling)."""
        best = None
        for flow in self.flows.values():
            if flow.rate > 0:
                t = flow.remaining / flow.rate
                if best is None or t < best:
                    best = t
        if self.tcp is not None:
            for when in [f.ramp_at for f in self.flows.values() if f.ramp_at is not None] + \
                    [t for t, _ in self.draining.values()]:
                t = max(when - self.last_update, 0.0)
                if best is None or t < best:
                    best = t
        return None if best is None else self.last_update + best

    def recompute(self, touched: Iterable[Hop] | None = None) -> None:
        """Strict priority between levels (0 first), max-min fair within a level, by
        progressive filling of each level over what the levels above left.

        With `touched` (the links of the flows that arrived, left or changed) only the
        flows coupled to them are re-shared: the connected component of flows and links
        reachable from those links through shared links. Max-min sharing in one component
        does not depend on any other, so the result is exact; the work is what changed,
        not what exists (SimGrid's lazy max-min re-solves only the constraints a modified
        variable touches in the same spirit: Casanova et al., "Versatile, scalable, and
        accurate simulation of distributed applications and platforms", JPDC 2014)."""
        if touched is None:
            links = [hop for hop, link in self.links.items() if link.flows or link.kv_rate]
            flows = list(self.flows)
        else:
            links, flows = self._component(touched)
        for hop in links:
            self.links[hop].kv_rate = 0.0
        residual: dict[Hop, float] = {hop: self.links[hop].kv_capacity for hop in links
                                      if self.links[hop].flows}
        by_level: dict[int, set[int]] = {}
        for fid in flows:
            by_level.setdefault(self.flows[fid].level, set()).add(fid)
        for level in sorted(by_level):
            self._fill(by_level[level], residual)

    def _component(self, touched: Iterable[Hop]) -> tuple[list[Hop], list[int]]:
        """The links and flows reachable from `touched` through flows sharing links."""
        seen_links: set[Hop] = set()
        seen_flows: set[int] = set()
        stack = [hop for hop in touched if hop in self.links]
        while stack:
            hop = stack.pop()
            if hop in seen_links:
                continue
            seen_links.add(hop)
            for fid in self.links[hop].flows:
                if fid not in seen_flows:
                    seen_flows.add(fid)
                    stack.extend(h for h in self.flows[fid].path if h not in seen_links)
        return list(seen_links), list(seen_flows)

    def _fill(self, unfrozen: set[int], residual: dict[Hop, float]) -> None:
        """Weighted progressive filling: a link's residual is split in proportion to its
        unfrozen flows' weights; a capped flow freezes at its cap when that binds first.

        The bottleneck link comes from a lazy min-heap of residual / weight: a link's ratio
        only grows as flows on it freeze (each freezes at or below the current minimum),
        so a stale entry is re-pushed with its current ratio when it surfaces; capped flows
        wait in a heap of cap / weight. Each step costs a few heap operations, not a scan
        of every link and flow (htsim and SimGrid's max-min solvers keep the same kind of
        ordered structure)."""
        flows = self.flows
        active: dict[Hop, set[int]] = {}
        weights: dict[Hop, float] = {}
        caps: list[tuple[float, int]] = []
        for fid in unfrozen:
            flow = flows[fid]
            w = flow.weight
            for hop in flow.path:
                active.setdefault(hop, set()).add(fid)
                weights[hop] = weights.get(hop, 0.0) + w
            cap = flow.effective_cap()
            if cap is not None:
                caps.append((cap / w, fid))
        heapq.heapify(caps)
        heap = [(residual[h] / weights[h], h) for h in active]
        heapq.heapify(heap)
        while unfrozen:
            ratio, hop = heap[0]
            if hop not in active:
                heapq.heappop(heap)
                continue
            current = residual[hop] / weights[hop]
            if current != ratio:
                heapq.heapreplace(heap, (current, hop))
                continue
            unit = max(ratio, 0.0)
            while caps and caps[0][1] not in unfrozen:
                heapq.heappop(caps)
            if caps and caps[0][0] < unit:
                _, fid = heapq.heappop(caps)
                self._freeze(fid, flows[fid].effective_cap(), unfrozen, residual, active,
                             weights)
                continue
            for fid in list(active[hop]):
                self._freeze(fid, unit * flows[fid].weight, unfrozen, residual, active,
                             weights)

    def _freeze(self, fid: int, rate: float, unfrozen: set[int], residual: dict[Hop, float],
                active: dict[Hop, set[int]], weights: dict[Hop, float]) -> None:
        flow = self.flows[fid]
        flow.rate = rate
        unfrozen.discard(fid)
        for h in flow.path:
            residual[h] -= rate
            self.links[h].kv_rate += rate
            members = active.get(h)
            if members is not None:
                members.discard(fid)
                weights[h] -= flow.weight
                if not members:
                    del active[h]
                    del weights[h]

    def set_level(self, flow: Flow, level: int, now: float) -> None:
        """A flow changes priority level (MFS promotes at layer boundaries)."""
        if flow.level != level:
            self.advance(now)
            flow.level = level
            self.recompute(flow.path)
