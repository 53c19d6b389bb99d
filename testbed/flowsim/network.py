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

One concern per module: what links and flows hold (links.py), path choice (paths.py),
link faults, background and levels (conditions.py), the TCP ramp (ramp.py), max-min
sharing (sharing.py); this one keeps the flows' lifecycle and time.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

import numpy as np

from testbed.flowsim.conditions import LinkConditions
from testbed.flowsim.links import Flow, Hop, LinkState, byte_columns
from testbed.flowsim.paths import PathChoice
from testbed.flowsim.ramp import TcpRamp
from testbed.flowsim.sharing import MaxMinSharing
from testbed.model import tcp as tcpmodel
from testbed.model.cost import gbps_to_bytes_per_s
from testbed.topologies.fattree import FatTreeSpec
from testbed.topologies.routing import PairPaths


class FluidNetwork(PathChoice, LinkConditions, TcpRamp, MaxMinSharing):
    """Links from a FatTreeSpec; flows share them max-min fairly.

    State is kept lazily so that an event costs what it changes: a flow's `remaining` is
    as of its last rate change (`t0`) and its completion time sits in a heap; a link
    integrates its byte counters only when its rate changes or someone reads them
    (`advance`). A flow or link whose rate does not change is not touched."""

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
        self.flows: dict[int, Flow] = {}
        self.level_bytes: dict[int, float] = {}  # KV bytes delivered per priority level
        self._next_id = 0
        self.last_update = 0.0
        self._path_cache: dict[tuple[str, str], list[list[Hop]]] = {}
        self._pairs = PairPaths(spec)
        self._ends: list[tuple[float, int, int]] = []  # (bytes out, flow id, version)
        self._ramps: list[tuple[float, int]] = []  # (window doubles, flow id)
        self._unbound: set[int] = set()  # in slow start, window no longer binding
        self._groups: dict[object, list[Flow]] = {}  # transfer -> its unequal streams
        self._umax: dict[int, float] = {}  # link -> largest rate / weight on it (cache)
        self._leveled = 0  # flows above level 0: strict priority is in use
        self._links_down = 0  # directed links failed now
        self._epoch = None  # start time that seniority weights are relative to
        self.incremental = True  # re-share by invalidation (False: whole components)

    # -- flows -----------------------------------------------------------------------
    def add_flow(self, path: list[Hop], size: float, now: float, tag: object = None,
                 level: int = 0, shard: tuple[int, int] = (0, 1), share: bool = True,
                 streams: int = 1, group: object = None) -> Flow:
        """`shard` (k, n): this flow is stream k of a transfer's n parallel ones (under the
        TCP model they share unequally: tcp.shard_share); `group` (any key, the same for
        all n) names the transfer, so that its streams still sending share unequally among
        themselves when one is done (_rerank). `share=False` leaves the
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
            flow.rtt = self.path_rtt(path, size)
            flow.window_cap = 0.0  # the handshake
            flow.ramp_at = now + self.tcp.handshake_rtts * flow.rtt
            if self.tcp.join_stall_s:
                flow.ramp_at += tcpmodel.join_stall(size, self._path_busy(flow), self.tcp)
            heapq.heappush(self._ramps, (flow.ramp_at, flow.flow_id))
            if self.rtt_exponent:
                flow.weight = flow.rtt ** -self.rtt_exponent
            flow.shard_factor = tcpmodel.shard_share(*shard, self.tcp.shard_spread)
            flow.weight *= flow.shard_factor
            if self.tcp.seniority_s:
                flow.weight *= self._seniority(now)
            flow.alone_share = flow.shard_factor / shard[1]
            if group is not None and shard[1] > 1 and self.tcp.shard_spread:
                flow.group, flow.shard_k = group, shard[0]
                self._groups.setdefault(group, []).append(flow)
        self.flows[flow.flow_id] = flow
        if level:
            self._leveled += 1
        if share:
            self.recompute(path, changed=[flow])
        return flow

    def remove_flows(self, now: float, doomed: Callable[[Flow], bool]) -> list[Flow]:
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
        for group in {f.group for f in flows if f.group is not None}:
            touched.update(self._rerank(group))
        if flows:
            self._recompute_links(touched, flows)

    def _rerank(self, group: object) -> set[int]:
        """A transfer's streams still sending take tcp.shard_share by their order among
        themselves, so that together they weigh as many streams as they are: the inequality
        is among one transfer's streams (who loses packets first), not a handicap against
        others' (TCP is fair per stream), and the last one alone weighs one stream. Alone
        on a bottleneck this changes no end (the link stays full and the first still ends
        1 + spread times sooner). Returns the links of streams whose weight moved."""
        live = [f for f in self._groups.pop(group) if f.flow_id in self.flows]
        if not live:
            return set()
        self._groups[group] = live
        moved: set[int] = set()
        for rank, flow in enumerate(sorted(live, key=lambda f: f.shard_k)):
            factor = tcpmodel.shard_share(rank, len(live), self.tcp.shard_spread)
            if factor != flow.shard_factor:
                flow.weight *= factor / flow.shard_factor
                flow.shard_factor = factor
                moved.update(flow.links)
        return moved

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
        """A flow's new share: settle it at the old rate, then schedule its last byte.
        Its links' largest shares (_umax) are the caller's to forget, once per link."""
        if rate == flow.rate:
            return
        self._settle(flow)
        flow.rate = rate
        flow.version += 1
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
        self._settle_links(self.last_update)

    def _settle_links(self, now: float) -> None:
        for link in self.link_list:
            if link.kv_rate or link.background:  # an idle link's counters stand still
                link.settle(now)

    def link_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """KV and background bytes every link (link_list's order) has carried up to the
        last `advance`."""
        return byte_columns(self.link_list)

    def kv_rates(self) -> list[float]:
        """Every link's KV rate now (bytes/s, link_list's order)."""
        return [lk.kv_rate for lk in self.link_list]

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
