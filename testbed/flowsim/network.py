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

import numpy as np

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
    kv_bytes: float = 0.0  # integral of kv_rate up to `t0`
    bg_bytes: float = 0.0  # integral of background rate up to `t0`
    index: int = 0  # position in FluidNetwork.link_list
    t0: float = 0.0

    @property
    def kv_capacity(self) -> float:
        return 0.0 if self.down else self.capacity * (1.0 - self.background)

    def settle(self, now: float) -> None:
        """Integrate the byte counters up to `now` (before a rate changes, or to read)."""
        dt = now - self.t0
        if dt > 0:
            if self.kv_rate:
                self.kv_bytes += self.kv_rate * dt
            if self.background:
                self.bg_bytes += self.background * self.capacity * dt
            self.t0 = now


@dataclass
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

    def effective_cap(self) -> float | None:
        caps = [c for c in (self.cap, self.window_cap) if c is not None]
        return min(caps) if caps else None


class FluidNetwork:
    """Links from a FatTreeSpec; flows share them max-min fairly.

    State is kept lazily so that an event costs what it changes: a flow's `remaining` is
    as of its last rate change (`t0`) and its completion time sits in a heap; a link
    integrates its byte counters only when its rate changes or someone reads them
    (`advance`). A flow or link whose rate does not change is not touched."""

    # Components of at least this many flows are filled on arrays (fill_on_arrays);
    # smaller ones by the heap-driven Python fill, which has less fixed cost.
    ARRAY_FILL_MIN_FLOWS = 48
    # An incremental re-sharing that has to re-fill more than this many flows, or this
    # share of all flows, gives up and re-shares the whole component (exact either way;
    # this only bounds wasted work: a component can hold thousands of flows).
    INCREMENTAL_MAX_FLOWS = 64
    INCREMENTAL_MAX_SHARE = 1 / 32
    SATURATED = 1 - 1e-9  # a link this full counts as saturated (float rounding)

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
        self.link_list: list[LinkState] = []
        factor = capacity_factor or {}
        for link in spec.links:
            # a calibration (testbed calibrate) scales what a tier's links really deliver
            cap = gbps_to_bytes_per_s(link.capacity_gbps) * factor.get(link.tier, 1.0)
            for hop in ((link.a, link.b), (link.b, link.a)):
                state = LinkState(hop, link.tier, cap, index=len(self.link_list))
                self.links[hop] = state
                self.link_list.append(state)
        self._kv_cap = np.array([lk.kv_capacity for lk in self.link_list], dtype=float)
        self.flows: dict[int, Flow] = {}
        self.level_bytes: dict[int, float] = {}  # KV bytes delivered per priority level
        self._next_id = 0
        self.last_update = 0.0
        self._path_cache: dict[tuple[str, str], list[list[Hop]]] = {}
        self._pairs = PairPaths(spec)
        self._ends: list[tuple[float, int, int]] = []  # (bytes out, flow id, version)
        self._ramps: list[tuple[float, int]] = []  # (window doubles, flow id)
        self._unbound: set[int] = set()  # in slow start, window no longer binding
        self._umax: dict[int, float] = {}  # link -> largest rate / weight on it (cache)
        self._leveled = 0  # flows above level 0: strict priority is in use
        self._links_down = 0  # directed links failed now
        self.incremental = True  # re-share by invalidation (False: whole components)

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
        if not self._links_down:
            return paths
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

    def _set_path(self, flow: Flow, path: list[Hop]) -> None:
        for h in flow.links:
            self.link_list[h].flows.discard(flow.flow_id)
        flow.path = path
        flow.links = tuple(self.links[hop].index for hop in path)
        for h in flow.links:
            self.link_list[h].flows.add(flow.flow_id)

    # -- failures --------------------------------------------------------------------
    def set_link(self, a: str, b: str, up: bool, now: float) -> int:
        """A link fails or returns; flows on a failed link move to a live equal-cost
        path of theirs where one exists. Returns how many flows moved."""
        self._clock(now)
        for hop in ((a, b), (b, a)):
            self._links_down += (not up) - self.links[hop].down
            self.links[hop].down = not up
            self._kv_cap[self.links[hop].index] = self.links[hop].kv_capacity
        moved = 0
        if not up:
            for flow in self.flows.values():
                if any(self.links[h].down for h in flow.path):
                    src, dst = flow.path[0][0], flow.path[-1][1]
                    live = [p for p in self.live_paths(src, dst)
                            if not any(self.links[h].down for h in p)]
                    if live:
                        self._set_path(flow, live[flow.flow_id % len(live)])
                        moved += 1
        self.recompute()
        return moved

    # -- background ------------------------------------------------------------------
    def set_background(self, fractions: dict[Hop, float], now: float) -> None:
        self._clock(now)
        for hop, f in fractions.items():
            link = self.links[hop]
            link.settle(now)
            link.background = min(max(f, 0.0), MAX_BACKGROUND)
            self._kv_cap[link.index] = link.kv_capacity
        self.recompute()

    def tier_congestion(self) -> dict[int, float]:
        """c_tier: mean background (non-KV) utilisation over the tier's links."""
        sums: dict[int, list[float]] = defaultdict(list)
        for link in self.links.values():
            sums[link.tier].append(link.background)
        return {tier: min(sum(v) / len(v), 0.99) for tier, v in sums.items()}

    # -- flows -----------------------------------------------------------------------
    def add_flow(self, path: list[Hop], size: float, now: float, tag: object = None,
                 level: int = 0, shard: tuple[int, int] = (0, 1), share: bool = True,
                 streams: int = 1) -> Flow:
        """`shard` (k, n): this flow is stream k of a transfer's n parallel ones (under the
        TCP model they share unequally: tcp.shard_share). `share=False` leaves the
        re-sharing to the caller (flows arriving together: one recompute for all).
        `streams` > 1: one fluid flow for that many identical streams on one path, started
        together (size is theirs together): max-min gives each the same rate, so one flow
        of weight `streams` carries exactly their sum, at a quarter of the work for four."""
        self._clock(now)
        if streams > 1 and self.tcp is not None:
            raise ValueError("TCP streams keep their own windows: one flow each")
        flow = Flow(self._next_id, [], size, size, now, tag, level, t0=now,
                    weight=float(streams))
        self._next_id += 1
        self._set_path(flow, path)
        if self.tcp is not None:
            flow.rtt = self.path_rtt(path)
            flow.window_cap = 0.0  # the handshake
            flow.ramp_at = now + self.tcp.handshake_rtts * flow.rtt
            heapq.heappush(self._ramps, (flow.ramp_at, flow.flow_id))
            if self.rtt_exponent:
                flow.weight = flow.rtt ** -self.rtt_exponent
            flow.weight *= tcpmodel.shard_share(*shard, self.tcp.shard_spread)
            flow.alone_share = tcpmodel.shard_share(*shard, self.tcp.shard_spread) / shard[1]
        self.flows[flow.flow_id] = flow
        if level:
            self._leveled += 1
        if share:
            self.recompute(path, changed=[flow])
        return flow

    def path_rtt(self, path: list[Hop]) -> float:
        links = [self.links[h] for h in path]
        tier = max((link.tier for link in links), default=0)
        return tcpmodel.path_rtt(self._latency_s.get(tier, 0.0),
                                 [link.capacity for link in links], self.tcp)

    def remove_flows(self, now: float, doomed) -> list[Flow]:
        """Take flows out (their receiver died) without finishing them."""
        self._clock(now)
        for fid in [fid for fid, (_, f) in self.draining.items() if doomed(f)]:
            del self.draining[fid]
        gone = [f for f in self.flows.values() if doomed(f)]
        for flow in gone:
            self._settle(flow)
        self._detach(gone)
        return gone

    def _detach(self, flows: list[Flow]) -> None:
        """Take flows off the network and its links, and re-share the bandwidth."""
        touched: set[int] = set()
        for flow in flows:
            del self.flows[flow.flow_id]
            self._unbound.discard(flow.flow_id)
            if flow.level:
                self._leveled -= 1
            for h in flow.links:
                self.link_list[h].flows.discard(flow.flow_id)
            touched.update(flow.links)
        if flows:
            self._recompute_links(touched, flows)

    # -- time ------------------------------------------------------------------------
    def _clock(self, now: float) -> None:
        if now > self.last_update:
            self.last_update = now

    def _settle(self, flow: Flow) -> None:
        """Bring one flow's remaining bytes to the network's clock."""
        dt = self.last_update - flow.t0
        if dt > 0:
            moved = min(flow.remaining, flow.rate * dt)
            if moved:
                flow.remaining -= moved
                self.level_bytes[flow.level] = self.level_bytes.get(flow.level, 0.0) + moved
            flow.t0 = self.last_update

    def _set_rate(self, flow: Flow, rate: float) -> None:
        """A flow's new share: settle it at the old rate, then schedule its last byte."""
        if rate == flow.rate:
            return
        self._settle(flow)
        flow.rate = rate
        flow.version += 1
        for h in flow.links:
            self._umax.pop(h, None)
        flow.due = None
        if rate > 0:
            flow.due = flow.t0 + flow.remaining / rate
        elif flow.remaining <= flow.size * 1e-9:
            flow.due = flow.t0
        if flow.due is not None:
            heapq.heappush(self._ends, (flow.due, flow.flow_id, flow.version))
            if len(self._ends) > 4 * len(self.flows) + 1024:
                self._compact_ends()
        if flow.ramp_at is not None:
            self._check_window(flow)

    def _compact_ends(self) -> None:
        """Drop the completion heap's stale entries (one per rate change: at thousands of
        flows they would soon outnumber the live ones a thousand to one)."""
        self._ends = [(f.due, f.flow_id, f.version) for f in self.flows.values()
                      if f.due is not None and f.end is None]
        heapq.heapify(self._ends)

    def _check_window(self, flow: Flow) -> None:
        if flow.window_cap is not None and 0.0 < flow.rate < flow.window_cap * (1 - 1e-9):
            self._unbound.add(flow.flow_id)
        else:
            self._unbound.discard(flow.flow_id)

    def advance(self, now: float) -> None:
        """Bring every flow's remaining bytes and every link's counters to `now` (for
        readers of all of them; the network itself settles only what it changes)."""
        self._clock(now)
        for flow in self.flows.values():
            self._settle(flow)
        for link in self.link_list:
            link.settle(self.last_update)

    def pop_finished(self, now: float) -> list[Flow]:
        """Remove flows whose bytes are delivered, up to float rounding (1 ns or 1 ppb).
        Under the TCP model a delivered flow leaves the links at once but is finished
        only after its tail; due slow-start steps are applied here too."""
        self._clock(now)
        if self.tcp is not None:
            self._ramp(now)
        done: list[Flow] = []
        later: list[tuple[float, int, int]] = []
        ends, flows = self._ends, self.flows
        # entries up to a microsecond late are looked at: rounding may put a flow's last
        # byte a hair after the event that was scheduled for it
        while ends and ends[0][0] <= now + 1e-6:
            entry = heapq.heappop(ends)
            flow = flows.get(entry[1])
            if flow is None or flow.version != entry[2] or flow.end is not None:
                continue
            self._settle(flow)
            if flow.remaining <= flow.size * 1e-9 or (
                    flow.rate > 0 and flow.remaining / flow.rate <= 1e-9):
                flow.remaining = 0.0
                flow.end = now
                done.append(flow)
            else:
                later.append(entry)
        for entry in later:
            heapq.heappush(ends, entry)
        self._detach(done)
        if self.tcp is None:
            return done
        for flow in done:
            self.draining[flow.flow_id] = (now + self.tcp.tail_rtts * flow.rtt
                                           + self._contention_delay(flow, now), flow)
        ended = [f for t, f in self.draining.values() if t <= now + 1e-12]
        for flow in ended:
            flow.end = now
            del self.draining[flow.flow_id]
        return ended

    def _contention_delay(self, flow: Flow, now: float) -> float:
        """tcp.contention_delay for a flow whose bytes are out now: its time beyond what
        it would have taken alone on its path (with its own transfer's other streams)."""
        idle = self.tcp.contention_idle
        if not idle:
            return 0.0
        rate = min(self.links[h].kv_capacity for h in flow.path) * flow.alone_share
        if rate <= 0:
            return 0.0
        alone = tcpmodel.lone_transfer_time(flow.size, rate, flow.rtt, self.tcp) \
            - self.tcp.tail_rtts * flow.rtt
        return tcpmodel.contention_delay(now - flow.start, alone, idle)

    def _ramp(self, now: float) -> None:
        """Slow start: every due window doubles; a window that no longer binds (the flow
        gets less than it allows) leaves slow start for good, as TCP does at its first loss."""
        due: set[int] = set(self._unbound)
        ramps = self._ramps
        while ramps and ramps[0][0] <= now + 1e-12:
            when, fid = heapq.heappop(ramps)
            flow = self.flows.get(fid)
            if flow is not None and flow.ramp_at == when:
                due.add(fid)
        changed: set[int] = set()
        capped: list[Flow] = []  # flows whose window changed
        for fid in sorted(due):
            flow = self.flows[fid]
            if flow.ramp_at is None:
                continue
            capped.append(flow)
            if flow.window_cap is not None and 0.0 < flow.rate < flow.window_cap * (1 - 1e-9):
                flow.window_cap = flow.ramp_at = None
                self._unbound.discard(fid)
                changed.update(flow.links)
                continue
            while flow.ramp_at is not None and flow.ramp_at <= now + 1e-12:
                flow.rounds += 1  # (several rounds at once only if the caller skipped events)
                flow.window_cap = tcpmodel.window_rate(flow.rounds, flow.rtt, self.tcp)
                flow.ramp_at += flow.rtt
                if flow.window_cap >= min(self.links[h].capacity for h in flow.path):
                    flow.window_cap = flow.ramp_at = None
                changed.update(flow.links)
            if flow.ramp_at is not None:
                heapq.heappush(ramps, (flow.ramp_at, fid))
                self._check_window(flow)
            else:
                self._unbound.discard(fid)
        if changed:
            self._recompute_links(changed, changed=capped)

    def next_completion(self) -> float | None:
        """Time of the next change at current rates: a flow finishing (or, under the TCP
        model, its tail ending or its window doubling)."""
        ends, flows = self._ends, self.flows
        while ends:
            _, fid, version = ends[0]
            flow = flows.get(fid)
            if flow is not None and flow.version == version and flow.end is None:
                break
            heapq.heappop(ends)
        best = ends[0][0] if ends else None
        if self.tcp is not None:
            ramps = self._ramps
            while ramps and (ramps[0][1] not in flows
                             or flows[ramps[0][1]].ramp_at != ramps[0][0]):
                heapq.heappop(ramps)
            for when in [ramps[0][0]] if ramps else []:
                if best is None or when < best:
                    best = when
            for when, _ in self.draining.values():
                if best is None or when < best:
                    best = when
        return None if best is None else max(best, self.last_update)

    # -- sharing -----------------------------------------------------------------------
    def recompute(self, touched: Iterable[Hop] | None = None,
                  changed: Iterable[Flow] | None = None) -> None:
        """Strict priority between levels (0 first), max-min fair within a level, by
        progressive filling of each level over what the levels above left.

        With `touched` (the links of the flows that arrived, left or changed) the work is
        what changed, not what exists: first only the flows whose bottleneck broke are
        re-filled (_reshare); with strict priority levels in use, or when that grows too
        large, the connected component of flows and links reachable from those links is
        re-shared whole. Max-min sharing in one component does not depend on any other,
        so either is exact (SimGrid's lazy max-min re-solves only the constraints a
        modified variable touches in the same spirit: Casanova et al., "Versatile,
        scalable, and accurate simulation of distributed applications and platforms",
        JPDC 2014).

        `changed`: the flows whose own state changed (arrived, cap or window moved), when
        nothing else did: no other flow's share can have broken yet, so only these are
        checked first (None: any flow on the touched links may be affected, as after a
        weight change)."""
        if touched is None:
            self._recompute_links(None)
        else:
            self._recompute_links({self.links[hop].index for hop in touched
                                   if hop in self.links}, changed=changed)

    def _recompute_links(self, touched: set[int] | None, gone: list[Flow] = (),
                         changed: Iterable[Flow] | None = None) -> None:
        """Re-share after a change on `touched` links (None: anything may have changed);
        `gone`: flows just taken off them, whose rates the links still carry; `changed`:
        see recompute."""
        if touched is not None:
            for h in touched:
                self._umax.pop(h, None)
            if self.incremental and not self._leveled and self._reshare(touched, gone,
                                                                        changed):
                return
        if touched is None:
            links = [lk.index for lk in self.link_list if lk.flows or lk.kv_rate]
            flows = list(self.flows)
            self._leveled = sum(1 for f in self.flows.values() if f.level)
            self._umax.clear()
        else:
            links, flows = self._component(touched)
        now = self.last_update
        for h in links:
            self.link_list[h].settle(now)
        if len(flows) >= self.ARRAY_FILL_MIN_FLOWS:
            self._share_on_arrays(links, flows)
            return
        for h in links:
            self.link_list[h].kv_rate = 0.0
        residual = {h: self.link_list[h].kv_capacity for h in links
                    if self.link_list[h].flows}
        by_level: dict[int, set[int]] = {}
        for fid in flows:
            by_level.setdefault(self.flows[fid].level, set()).add(fid)
        for level in sorted(by_level):
            self._fill(by_level[level], residual)

    # -- incremental re-sharing --------------------------------------------------------
    def _reshare(self, touched: set[int], gone: list[Flow],
                 changed: Iterable[Flow] | None = None) -> bool:
        """Re-fill only the flows whose max-min condition broke; False if that grew past
        INCREMENTAL_MAX_FLOWS (the caller then re-shares the whole component).

        A max-min allocation is the unique feasible one in which every flow is at its cap
        or crosses a saturated link on which no flow has a larger rate / weight (its
        bottleneck). A change can break that only for flows on links whose load or rates
        changed, and only through a link that is or was saturated. So: check those flows;
        re-fill the broken ones (set S) over what the others leave, others held fixed;
        a flow of S that still has no bottleneck is held back by flows with larger shares
        on its saturated links, which join S; every link whose rates changed has its flows
        checked again; repeat until nothing is broken. At that point every flow has its
        bottleneck, so the allocation is the max-min one, exactly. In a fabric where one
        arrival couples hundreds of flows it re-fills the handful whose rates move (the
        partial invalidation of SimGrid's lazy max-min, Casanova et al. JPDC 2014, taken
        from constraints to bottlenecks)."""
        flows, link_list = self.flows, self.link_list
        ever_saturated = {h for h in touched if self._saturated(link_list[h])}
        now = self.last_update
        for flow in gone:  # their bytes stop: the links carry what is left
            for h in flow.links:
                link = link_list[h]
                link.settle(now)
                link.kv_rate -= flow.rate
        unfit: set[int] = set()
        if changed is not None and not gone:  # nobody else's situation moved yet
            check = {f.flow_id for f in changed if f.flow_id in flows}
        elif gone and changed is None:  # freed capacity matters where a link was full
            check = {fid for h in touched if h in ever_saturated for fid in link_list[h].flows}
        else:
            check = {fid for h in touched for fid in link_list[h].flows}
        refill: set[int] = set()
        while True:
            unfit |= {fid for fid in check if fid not in refill and not self._fit(flows[fid])}
            if not unfit:
                return True
            refill |= unfit
            if len(refill) > max(self.INCREMENTAL_MAX_FLOWS,
                                 len(flows) * self.INCREMENTAL_MAX_SHARE):
                return False
            moved = self._refill(refill, ever_saturated)
            check = {fid for h in moved
                     if h in ever_saturated or self._saturated(link_list[h])
                     for fid in link_list[h].flows if fid not in refill}
            unfit = set()
            for fid in refill:
                flow = flows[fid]
                if not self._fit(flow):  # held back on a saturated link by larger shares
                    share = flow.rate / flow.weight
                    unfit.update(g for h in flow.links if self._saturated(link_list[h])
                                 for g in link_list[h].flows
                                 if g not in refill and flows[g].rate / flows[g].weight > share)

    def _refill(self, refill: set[int], ever_saturated: set[int]) -> set[int]:
        """Max-min among `refill` over what the other flows leave; returns the links
        whose rates changed."""
        flows, link_list, now = self.flows, self.link_list, self.last_update
        links = {h for fid in refill for h in flows[fid].links}
        for h in links:
            link = link_list[h]
            if self._saturated(link):
                ever_saturated.add(h)
            link.settle(now)
        before = {}
        for fid in refill:
            flow = flows[fid]
            before[fid] = flow.rate
            for h in flow.links:
                link_list[h].kv_rate -= flow.rate
        residual = {h: link_list[h].kv_capacity - link_list[h].kv_rate for h in links}
        self._fill(set(refill), residual)
        changed = {h for fid in refill if flows[fid].rate != before[fid]
                   for h in flows[fid].links}
        for h in changed:
            if self._saturated(link_list[h]):
                ever_saturated.add(h)
        return changed

    def _saturated(self, link: LinkState) -> bool:
        return link.kv_rate >= link.kv_capacity * self.SATURATED

    def _fit(self, flow: Flow) -> bool:
        """Whether the flow is at its cap or has a bottleneck (see _reshare)."""
        cap = flow.effective_cap()
        if cap is not None:
            if flow.rate > cap / self.SATURATED:  # over a cap lowered since
                return False
            if flow.rate >= cap * self.SATURATED:
                return True
        share = flow.rate / flow.weight
        for h in flow.links:
            if self._saturated(self.link_list[h]) and share >= self._largest_share(h) * \
                    self.SATURATED:
                return True
        return False

    def _largest_share(self, h: int) -> float:
        got = self._umax.get(h)
        if got is None:
            flows = self.flows
            got = self._umax[h] = max((flows[f].rate / flows[f].weight
                                       for f in self.link_list[h].flows), default=0.0)
        return got

    def _component(self, touched: set[int]) -> tuple[list[int], list[int]]:
        """The links and flows reachable from `touched` through flows sharing links."""
        link_list, flows = self.link_list, self.flows
        seen_links = set(touched)
        seen_flows: set[int] = set()
        stack = list(seen_links)
        while stack:
            for fid in link_list[stack.pop()].flows:
                if fid not in seen_flows:
                    seen_flows.add(fid)
                    for h in flows[fid].links:
                        if h not in seen_links:
                            seen_links.add(h)
                            stack.append(h)
        return list(seen_links), list(seen_flows)

    def _fill(self, unfrozen: set[int], residual: dict[int, float]) -> None:
        """Weighted progressive filling: a link's residual is split in proportion to its
        unfrozen flows' weights; a capped flow freezes at its cap when that binds first.

        The bottleneck link comes from a lazy min-heap of residual / weight: a link's ratio
        only grows as flows on it freeze (each freezes at or below the current minimum),
        so a stale entry is re-pushed with its current ratio when it surfaces; capped flows
        wait in a heap of cap / weight. Each step costs a few heap operations, not a scan
        of every link and flow (m3's flowSim, by contrast, scans for the bottleneck link at
        every step of every event)."""
        flows = self.flows
        active: dict[int, set[int]] = {}
        weights: dict[int, float] = {}
        caps: list[tuple[float, int]] = []
        for fid in unfrozen:
            flow = flows[fid]
            w = flow.weight
            for h in flow.links:
                active.setdefault(h, set()).add(fid)
                weights[h] = weights.get(h, 0.0) + w
            cap = flow.effective_cap()
            if cap is not None:
                caps.append((cap / w, fid))
        heapq.heapify(caps)
        heap = [(residual[h] / weights[h], h) for h in active]
        heapq.heapify(heap)
        while unfrozen:
            ratio, h = heap[0]
            if h not in active:
                heapq.heappop(heap)
                continue
            current = residual[h] / weights[h]
            if current != ratio:
                heapq.heapreplace(heap, (current, h))
                continue
            unit = max(ratio, 0.0)
            while caps and caps[0][1] not in unfrozen:
                heapq.heappop(caps)
            if caps and caps[0][0] < unit:
                _, fid = heapq.heappop(caps)
                self._freeze(fid, flows[fid].effective_cap(), unfrozen, residual, active,
                             weights)
                continue
            for fid in list(active[h]):
                self._freeze(fid, unit * flows[fid].weight, unfrozen, residual, active,
                             weights)

    def _freeze(self, fid: int, rate: float, unfrozen: set[int], residual: dict[int, float],
                active: dict[int, set[int]], weights: dict[int, float]) -> None:
        flow = self.flows[fid]
        self._set_rate(flow, rate)
        unfrozen.discard(fid)
        for h in flow.links:
            residual[h] -= rate
            self.link_list[h].kv_rate += rate
            members = active.get(h)
            if members is not None:
                members.discard(fid)
                weights[h] -= flow.weight
                if not members:
                    del active[h]
                    del weights[h]

    def _share_on_arrays(self, links: list[int], fids: list[int]) -> None:
        """The same sharing as `_fill`, level by level, on numpy arrays (big components:
        a fabric-wide one under a topology-blind scheduler holds hundreds of flows)."""
        flows = [self.flows[fid] for fid in fids]
        hops = max(len(f.links) for f in flows)
        sentinel = len(self.link_list)
        pad = (sentinel,) * hops
        glob = np.array([f.links + pad[len(f.links):] for f in flows], dtype=np.int64)
        used, local = np.unique(glob, return_inverse=True)
        local = local.reshape(glob.shape)
        m = len(used) - (used[-1] == sentinel)
        residual = self._kv_cap[used[:m]].copy()
        weight = np.array([f.weight for f in flows], dtype=float)
        cap_ratio = np.array([c if (c := f.effective_cap()) is not None else np.inf
                              for f in flows], dtype=float) / weight
        level = np.array([f.level for f in flows])
        rates = np.zeros(len(flows))
        for lv in np.unique(level):
            rows = np.flatnonzero(level == lv)
            got = fill_on_arrays(local[rows], weight[rows], cap_ratio[rows], residual)
            rates[rows] = got
            residual -= _per_link(local[rows], got, m)
        for flow, rate in zip(flows, rates.tolist(), strict=True):
            self._set_rate(flow, rate)
        kv = _per_link(local, rates, m).tolist()
        for g, rate in zip(used[:m].tolist(), kv, strict=True):
            self.link_list[g].kv_rate = rate
        for h in links:  # links left without flows carry nothing
            if not self.link_list[h].flows:
                self.link_list[h].kv_rate = 0.0

    def set_level(self, flow: Flow, level: int, now: float) -> None:
        """A flow changes priority level (MFS promotes at layer boundaries)."""
        if flow.level != level:
            self._clock(now)
            self._settle(flow)
            self._leveled += (level != 0) - (flow.level != 0)
            flow.level = level
            self.recompute(flow.path)


def _per_link(inc: np.ndarray, values: np.ndarray, m: int) -> np.ndarray:
    """Sum of `values` (one per flow) over each of m links; column entries >= m are
    padding."""
    flat = inc.ravel()
    real = flat < m
    return np.bincount(flat[real], weights=np.repeat(values, inc.shape[1])[real],
                       minlength=m)[:m]


def fill_on_arrays(inc: np.ndarray, weight: np.ndarray, cap_ratio: np.ndarray,
                   residual: np.ndarray) -> np.ndarray:
    """Weighted max-min rates of n flows over m links, with per-flow caps, on arrays.

    inc: (n, hops) link indices per flow, padded with m; cap_ratio: cap / weight (inf
    where none); residual: the m links' capacity left. Progressive filling freezes one
    bottleneck at a time; here every round freezes all *local* bottlenecks at once: a
    link whose fair share (residual / weight of its unfrozen flows) is no larger than
    any limit of the flows crossing it (their other links' shares, their caps). No flow
    of such a link can freeze earlier elsewhere, and no other flow takes from it, so it
    saturates at exactly that share, as in sequential filling; a cap is a one-flow link.
    The global minimum is always local, so every round freezes something, and rounds
    number the bottleneck levels, not the links (the distributed max-min algorithms of
    Bertsekas & Gallager, "Data Networks", 6.5, work by the same local test)."""
    n, hops = inc.shape
    m = len(residual)
    flat = inc.ravel()
    real = flat < m
    owner = np.repeat(np.arange(n), hops)
    order = np.argsort(flat, kind="stable")
    order = order[real[order]]
    by_link, rows_by_link = flat[order], owner[order]
    starts = np.flatnonzero(np.r_[True, by_link[1:] != by_link[:-1]]) if len(order) else \
        np.zeros(0, dtype=np.int64)
    link_ids = by_link[starts]
    resid = residual.astype(float).copy()
    wsum = np.bincount(flat[real], weights=np.repeat(weight, hops)[real], minlength=m)
    count = np.bincount(flat[real], minlength=m)
    rate = np.zeros(n)
    active = np.ones(n, dtype=bool)
    share = np.full(m + 1, np.inf)
    link_min = np.full(m, np.inf)
    while active.any():
        live = count > 0
        share[:m] = np.inf
        share[:m][live] = np.maximum(resid[live], 0.0) / wsum[live]
        flow_min = share[inc].min(axis=1)
        limit = np.minimum(flow_min, cap_ratio)
        limit[~active] = np.inf
        link_min[:] = np.inf
        if len(starts):
            link_min[link_ids] = np.minimum.reduceat(limit[rows_by_link], starts)
        bottleneck = np.append(live & (share[:m] <= link_min), False)
        freeze = active & (bottleneck[inc].any(axis=1) | (cap_ratio <= flow_min))
        rate[freeze] = limit[freeze] * weight[freeze]
        active &= ~freeze
        frozen = inc[freeze].ravel()
        keep = frozen < m
        frozen = frozen[keep]
        resid -= np.bincount(frozen, weights=np.repeat(rate[freeze], hops)[keep], minlength=m)
        wsum -= np.bincount(frozen, weights=np.repeat(weight[freeze], hops)[keep], minlength=m)
        count -= np.bincount(frozen, minlength=m)
    return rate
