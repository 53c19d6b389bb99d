"""KV transfers in the flow engine: a decision's P2D transfer as parallel shard flows,
their priority levels (MFS and its baselines), re-prioritisation, and what happens
when the fluid network finishes or re-times them."""

from __future__ import annotations

import math
from typing import Protocol

from testbed.control.network_seam import SimulatedNetwork
from testbed.control.plane import ControlPlane
from testbed.flowsim.events import EventLoop
from testbed.flowsim.pair_lanes import Lanes
from testbed.flowsim.reuse_fetch import REUSE, Fetch
from testbed.lifecycle import RequestState
from testbed.model import granularity, mfs, reuse
from testbed.model.kv import ModelSpec, kv_bytes_per_token
from testbed.model.oracle import Oracle
from testbed.model.timing import TimingModel
from testbed.scenario import Scenario
from testbed.serving import DecodeInstance
from testbed.topologies.routing import path_text
from testbed.topologies.traffic_classes import kv_lanes
from testbed.workloads.build import Workload

NOTICE = "notice"  # the stage tag of a transfer's notice (the engine's, on packets)


def lands_at_notice(scenario: Scenario) -> bool:
    """Whether a transfer lands at a notice sent after its shards' writes completed, as
    the emulation's decode workers land the Transfer Engine's (its TCP transport: not
    under ns-3's RoCE)."""
    return (scenario.emulation.kv_transport == "mooncake"
            and scenario.ns3.transport != "roce")


def engine_lanes(scenario: Scenario) -> int:
    """The Transfer Engine's connections per sender and receiver that all shards between
    them share (traffic_classes.kv_lanes; not under ns-3's RoCE); 0: no such limit."""
    if scenario.ns3.transport == "roce":
        return 0
    return kv_lanes(scenario.emulation.kv_transport, scenario.emulation.kv_connections)


class TransferHost(Protocol):
    """What TransferPlane uses of the class it is mixed into (FlowSimulation)."""

    scenario: Scenario
    workload: Workload
    model: ModelSpec
    timing: TimingModel
    loop: EventLoop
    net: SimulatedNetwork
    plane: ControlPlane
    decode: dict[str, DecodeInstance]
    failed: set[str]  # decode instances that died
    fetches: dict[str, Fetch]  # request id -> its KV-reuse fetch in flight
    pruned: set[str]  # requests MFS moved to the scavenger class
    transfers: list[dict]  # transfers.csv rows
    flows_per_transfer: int
    _oracle: Oracle
    _deadlines: dict[str, float]  # request -> its P2D deadline
    _net_version: int  # the network's latest scheduled event
    _ledger: Lanes  # the engine's lanes: shards on them and waiting, per (prefill, decode)
    _lane_group: dict[str, object]  # request -> its latest transfer's streams
    _submitted: dict[int, float]  # flow id -> when its shards, which waited, were handed over
    _nic_bw: float  # bytes/s of a server's NIC

    def _fetched(self, rs: RequestState) -> None: ...


class TransferPlane:
    """FlowSimulation's transfers on the fluid network (its host: a TransferHost)."""

    def _call_overhead(self, rs: RequestState) -> float:
        """Send calls after the first, per shard (shards send in parallel)."""
        net = self.scenario.network
        if net.transfer_mode == "contiguous" or not net.per_call_s:
            return 0.0
        tokens = round(rs.eff_bytes / kv_bytes_per_token(self.model))
        calls = granularity.transfer_calls(net.transfer_mode, tokens,
                                           self.scenario.workload.block_tokens,
                                           self.model.n_layers, net.segment_blocks)
        return granularity.call_overhead_s(calls, net.per_call_s)

    def start_transfer(self, rs: RequestState) -> None:
        """rs.eff_bytes from rs.prefill to rs.decode as TP parallel flows, now (those
        the pair's lanes cannot take yet, as each frees)."""
        if rs.eff_bytes <= 0:
            self.loop.after(self._oracle.latency(rs.tier), lambda: self._transfer_done(rs))
            return
        paths = self.net.transfer_paths(rs.prefill, rs.decode, self.scenario.network.ecmp,
                                        self.flows_per_transfer)
        group = object()  # this transfer's streams (a retried one is another)
        rs.flows_left = self.flows_per_transfer  # shards, counted off as their flows end
        if self._ledger.lanes:
            self._lane_group[rs.req.request_id] = group
        now = self._ledger.admit((rs.prefill, rs.decode), [
            (rs, group, k, path, self.loop.now) for k, path in enumerate(paths)])
        if now:
            self._send_shards(rs, [(k, path) for _, _, k, path, _ in now], group)

    def _send_shards(self, rs: RequestState, shards: list[tuple[int, list]],
                     group: object, submitted: float | None = None) -> None:
        """Some of a transfer's shards (index, path) as flows, now; `submitted`: when
        they were handed to the engine, which their records start at (as the
        emulation's do), if they waited for a lane."""
        size = rs.eff_bytes / self.flows_per_transfer
        flows = [self.net.add_flow(path, size * len(ks), self.loop.now, tag=(rs, ks),
                                   level=self._initial_level,
                                   shard=(ks[0], self.flows_per_transfer), share=False,
                                   streams=len(ks), group=group)
                 for path, ks in self._stream_groups(shards)]  # one re-sharing for all
        if submitted is not None:
            self._submitted.update((f.flow_id, submitted) for f in flows)
        self.net.recompute({hop for _, path in shards for hop in path}, changed=flows)
        if self.scenario.network.flow_policy != "fair":
            self._reprioritize(reschedule_tick=False)
        self._reschedule_network()

    def _lanes(self) -> int:
        """Connections a pair's shards share (the engine's lanes), 0 for none; a packet
        engine that keeps them itself says 0."""
        return engine_lanes(self.scenario)

    def _next_on_lanes(self, pair: tuple[str, str], ended: int) -> None:
        """Shards waiting for the pair's lanes take those its `ended` shards freed, first
        come first served; one whose transfer was abandoned meanwhile (its target died,
        it was sent again) is dropped."""
        def live(shard) -> bool:
            rs, group = shard[0], shard[1]
            return self._lane_group.get(rs.req.request_id) is group and rs.decode not in self.failed

        starting: dict[int, tuple[RequestState, object, list, float]] = {}
        for rs, group, k, path, submitted in self._ledger.release(pair, ended, live):
            starting.setdefault(id(group), (rs, group, [], submitted))[2].append((k, path))
        for rs, group, shards, submitted in starting.values():
            self._send_shards(rs, shards, group, submitted)

    def _stream_groups(self, shards: list[tuple[int, list]]) -> list[tuple[list, tuple[int, ...]]]:
        """Shards (index, path) as network flows: under fair fluid sharing the shards on
        one path are one flow (they get equal rates and end together: exact, and a
        fraction of the work); with TCP windows or priority levels each is its own."""
        net = self.scenario.network
        if net.flow_model != "fluid" or net.flow_policy != "fair":
            return [(path, (k,)) for k, path in shards]
        groups: dict[tuple, list[int]] = {}
        by_index = dict(shards)
        for k, path in shards:
            groups.setdefault(tuple(path), []).append(k)
        return [(by_index[ks[0]], tuple(ks)) for ks in groups.values()]

    @property
    def _initial_level(self) -> int:
        """New flows start deferred at the bottom level (all at 0 under fair sharing)."""
        net = self.scenario.network
        return 0 if net.flow_policy == "fair" else mfs.initial_level(net.flow_policy,
                                                                      net.priority_levels)

    def _p2d_deadline(self, rs: RequestState) -> float:
        """A P2D transfer's explicit deadline: the TTFT deadline less the first decode
        iteration that must follow it (a full batch's, to be safe); fixed at arrival, so
        computed once (every re-prioritisation asks for every flow's)."""
        rid = rs.req.request_id
        deadline = self._deadlines.get(rid)
        if deadline is None:
            deadline = self._deadlines[rid] = mfs.p2d_deadline(
                rs.req.arrival_s, self.workload.slo_for(rid),
                self.timing.iteration_time(self.scenario.cluster.beta_max))
        return deadline

    def _reprioritize(self, reschedule_tick: bool = True) -> None:
        """Re-evaluate every KV flow's level (a layer boundary): MFS promotes as urgency
        grows; each flow sees only what its sender would (testbed.model.mfs.FlowView)."""
        net_cfg = self.scenario.network
        policy, levels = net_cfg.flow_policy, net_cfg.priority_levels
        now = self.loop.now
        self.net.advance(now)
        flows = list(self.net.flows.values())
        if policy == "mfs":
            self._prune(flows, now)
        changed = False
        for f in flows:
            rs, stage = f.tag
            if stage == NOTICE:
                continue  # a message, not KV: it keeps its class
            pruned = stage != REUSE and rs.req.request_id in self.pruned
            level = mfs.flow_level(policy, self._flow_view(f, now), now, f.level, pruned,
                                   levels, net_cfg.mfs_theta_top, net_cfg.mfs_theta_ratio)
            cap = None
            if policy == "karuna" and stage != REUSE:  # deadline flows at just their rate
                cap = mfs.karuna_min_rate(f.remaining, self._p2d_deadline(rs), now)
                cap = None if math.isinf(cap) else cap
            if level != f.level or cap != f.cap:
                f.level, f.cap = level, cap
                changed = True
        if changed:
            self.net.recompute()
            self._reschedule_network()
        if reschedule_tick:
            self.loop.after(net_cfg.reprioritize_s, self._reprioritize)

    def _flow_view(self, f, now: float) -> mfs.FlowView:
        rs, stage = f.tag
        if stage == REUSE:
            fetch = self.fetches[rs.req.request_id]
            r = reuse.retrieval_rli(now, fetch.expected_start, fetch.layer_s,
                                    f.size - f.remaining, f.size, self.model.n_layers)
            return mfs.FlowView(str(f.flow_id), f.remaining, None, rli=r,
                                bandwidth=self._oracle.bandwidth(fetch.tier))
        return mfs.FlowView(str(f.flow_id), f.remaining, self._p2d_deadline(rs),
                            bandwidth=self._oracle.bandwidth(rs.tier) / self.flows_per_transfer)

    def _prune(self, flows, now: float) -> None:
        """MFS's feasibility check, per sender: its P2D transfers share its NIC."""
        by_sender: dict[str, dict[str, mfs.Job]] = {}
        for f in flows:
            rs, stage = f.tag
            if stage == REUSE or rs.req.request_id in self.pruned:
                continue
            jobs = by_sender.setdefault(rs.prefill, {})
            rid = rs.req.request_id
            prev = jobs.get(rid)
            left = f.remaining + (prev.work_s * self._nic_bw if prev else 0.0)
            jobs[rid] = mfs.Job(rid, self._p2d_deadline(rs), left / self._nic_bw,
                                left / self._oracle.bandwidth(rs.tier))
        for jobs in by_sender.values():
            self.pruned |= mfs.prune_infeasible(list(jobs.values()), now,
                                                self.scenario.network.mfs_pruning)

    def _reschedule_network(self) -> None:
        self._net_version += 1
        version = self._net_version
        t = self.net.next_completion()
        if t is not None:
            self.loop.at(max(t, self.loop.now), lambda: self._network_event(version))

    def _network_event(self, version: int) -> None:
        if version != self._net_version:
            return
        self._finish_flows()
        self._reschedule_network()

    def _finish_flows(self) -> None:
        """Flows whose bytes are in: a fetch's prefix, a transfer's shards, whose
        transfer lands once its last shard does, or a transfer's notice, which lands it."""
        now = self.loop.now
        freed: dict[tuple[str, str], int] = {}  # shards ended, per pair
        for flow in self.net.pop_finished(now):
            rs, shards = flow.tag
            if shards == REUSE:
                self._fetched(rs)
                continue
            if shards == NOTICE:
                self._transfer_done(rs)
                continue
            self._record_shards(rs, flow, shards, now)
            pair = (rs.prefill, rs.decode)
            freed[pair] = freed.get(pair, 0) + len(shards)
            rs.flows_left -= len(shards)
            if rs.flows_left == 0:
                self._all_shards_in(rs)
        if self._ledger.lanes:
            for pair in sorted(freed):
                self._next_on_lanes(pair, freed[pair])

    def _record_shards(self, rs: RequestState, flow, shards: tuple, now: float) -> None:
        path = path_text(flow.path)
        start = self._submitted.pop(flow.flow_id, flow.start)
        for shard in shards:
            self.transfers.append({
                "request": rs.req.request_id, "shard": shard, "src": rs.prefill,
                "dst": rs.decode, "tier": rs.tier, "path": path,
                "bytes": rs.eff_bytes / self.flows_per_transfer,
                "start": start, "end": now,
            })

    def _all_shards_in(self, rs: RequestState) -> None:
        """The fluid flows carried bytes only: the tier's latency and the send calls'
        overhead come after the last byte, and the engine's notice its own trip (no
        queue delays it here: ns-3 sends it as a packet)."""
        trips = 2 if lands_at_notice(self.scenario) else 1
        delay = trips * self._oracle.latency(rs.tier) + self._call_overhead(rs)
        self.loop.after(delay, lambda rs=rs: self._transfer_done(rs))

    def _transfer_done(self, rs: RequestState) -> None:
        # False: aborted meanwhile, or a stale completion of an abandoned transfer
        if self.plane.landed(rs, self.loop.now):
            self.decode[rs.decode].kv_landed(rs)

    def _kv_ready(self, rs: RequestState) -> None:
        """Recomputed KV is in place on its target (unless the target died meanwhile:
        its detection recovers the request again)."""
        if rs.decode not in self.failed and self.plane.landed(rs, self.loop.now):
            self.decode[rs.decode].kv_landed(rs)
