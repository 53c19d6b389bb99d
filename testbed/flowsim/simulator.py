"""One flow-level run: a scenario cell, one scheduler, one seed -> run records.

Arrival -> prefill (FIFO, least work left) -> scheduler decision at prefill completion,
on what a real router sees (instance reports now, oracle as of its last refresh) -> KV
transfer as TP parallel flows from the prefill NIC over ECMP paths, max-min fair ->
admission at an iteration boundary -> output tokens -> completion.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from testbed.control.plane import ControlPlane, scenario_scheduler
from testbed.flowsim.events import EventLoop
from testbed.flowsim.flowkv import FlowKVControl
from testbed.flowsim.network import FluidNetwork
from testbed.lifecycle import RequestState, new_request, request_row
from testbed.model import granularity, mfs, reuse
from testbed.model.cache import HolderIndex, PrefixCache
from testbed.model.follow import Followed
from testbed.model.kv import kv_bytes_per_token, kv_cache_bytes
from testbed.model.oracle import Oracle
from testbed.model.schedulers import CandidateTable, switches_roles
from testbed.records import LinkSamples
from testbed.serving import DecodeBoard, DecodeInstance, PrefillInstance
from testbed.workloads.build import Workload, prewarm_placement

GB = 1e9
LINK_SAMPLE_S = 1.0
REUSE = "reuse"  # the stage tag of a KV-reuse fetch flow (P2D flows carry their shards)


@dataclass(frozen=True)
class Fetch:
    holder: str
    prefill: str
    tier: int
    size: float
    expected_start: float  # of the prefill, as estimated when the fetch began
    layer_s: float


@dataclass
class RunResult:
    requests: list[dict]
    transfers: list[dict]
    links: LinkSamples  # iterates as links.csv rows
    decision_us: list[float] = field(default_factory=list)
    events: int = 0
    sim_time_s: float = 0.0
    counters: dict = field(default_factory=dict)  # faults and recovery, for summary.json


class FlowSimulation:
    COALESCE_ITERATIONS = True  # decode instances skip iterations where nothing happens

    def __init__(self, scenario, scheduler_key: str, seed: int, workload: Workload,
                 follow: Mapping[str, tuple[str, str]] | None = None):
        """`follow`: request id -> (prefill, decode) placements recorded elsewhere (the
        packets'), taken instead of this run's own wherever they are possible."""
        self.scenario = scenario
        self.workload = workload
        self.loop = EventLoop()
        self._seed = seed
        self.rng = random.Random(seed * 7919 + 17)
        self.spec = scenario.cluster.spec()
        self.model = scenario.model_spec()
        self.timing = scenario.timing_model()
        cluster = scenario.cluster
        self.net = FluidNetwork(self.spec, random.Random(seed * 104729 + 3),
                                scenario.network.capacity_factor, scenario.tcp_params(),
                                scenario.network.tcp.rtt_exponent)
        self.scheduler = scenario_scheduler(scenario, scheduler_key, seed)
        self._prefer = {rid: p for rid, (p, _d) in (follow or {}).items()}
        if follow is not None:
            self.scheduler = Followed(self.scheduler, {rid: d for rid, (_p, d) in follow.items()})
        slow = cluster.slowdown
        self.prefill = {i.name: PrefillInstance(i.name, self.timing, self.model.n_layers,
                                                self.loop, self.prefill_done,
                                                slow.get(i.name, 1.0))
                        for i in self.spec.prefill_pool}
        self.fetches: dict[str, Fetch] = {}  # request id -> its KV-reuse fetch in flight
        self.pruned: set[str] = set()  # requests MFS moved to the scavenger class
        self.holders = HolderIndex()  # which decode caches hold a trace id's blocks
        self.board = DecodeBoard()  # what the router sees of every decode instance
        self.decode = {i.name: self.new_decoder(i.name) for i in self.spec.decode_pool}
        self._live: tuple | None = None  # (left out, live names, their rows, board slots)
        self.flows_per_transfer = scenario.network.flows_per_transfer or self.spec.tp
        tiers = dict(self.spec.tier_map)
        if switches_roles(scheduler_key):  # any instance may send to any other
            names = [i.name for i in self.spec.instances]
            tiers.update({(a, b): self.spec.tier(a, b) for a in names for b in names if a != b})
        self._oracle = Oracle(
            tier_map=tiers,
            tier_bandwidth_gbps=self.spec.tier_bandwidth_gbps,
            tier_latency_us=self.spec.tier_latency_us,
            congestion={},
            generated_at=0.0,
        )
        self.states: list[RequestState] = []
        self.transfers: list[dict] = []
        links = self.net.link_list
        self.links = LinkSamples([f"{lk.hop[0]}>{lk.hop[1]}" for lk in links],
                                 [lk.tier for lk in links],
                                 [lk.capacity * 8 / 1e9 for lk in links])
        self._open = 0
        self.failed: set[str] = set()  # decode instances that died (plane.dead: noticed)
        self.controller_back_at = 0.0  # the oracle does not refresh before this
        self.bg_override: dict[int, float] = {}
        self.faults_log: list[dict] = []
        self.plane = ControlPlane(self.scheduler, self.spec, scenario.recovery, self.timing,
                                  self)
        self.flowkv = FlowKVControl(self) if switches_roles(scheduler_key) else None
        self._net_version = 0
        self.reuse_bytes = 0.0
        self._nic_bw = self.spec.host_gbps * 1e9 / 8  # bytes/s of a server's NIC
        self._last_sample = (np.zeros(len(links)), np.zeros(len(links)))
        self._sample_bytes = np.array([lk.capacity * LINK_SAMPLE_S for lk in links])

    def new_decoder(self, name: str) -> DecodeInstance:
        """A decode engine on instance `name` (every decode instance; a prefill instance
        once FlowKV switches it to decode work)."""
        cluster, block_tokens = self.scenario.cluster, self.scenario.workload.block_tokens
        block_bytes = kv_bytes_per_token(self.model) * block_tokens
        self._live = None  # the candidate set changes
        return DecodeInstance(name, self.loop, self.timing, cluster.beta_max,
                              cluster.memory_gb * GB,
                              PrefixCache(block_tokens, block_bytes, self.holders, name),
                              self._completed, board=self.board,
                              coalesce=self.COALESCE_ITERATIONS)

    # -- setup -------------------------------------------------------------------------
    def _prewarm(self) -> None:
        placed = prewarm_placement(self.workload.history, sorted(self.decode), self._seed)
        for name, reqs in placed.items():
            self.decode[name].prewarm(reqs)

    def _background(self) -> None:
        bg = self.scenario.network.background
        fractions = {}
        for hop, link in self.net.links.items():
            f = self.bg_override.get(link.tier, bg.fraction(link.tier))
            if bg.jitter and f:
                f *= 1.0 + bg.jitter * self.rng.uniform(-1.0, 1.0)
            fractions[hop] = f
        self.net.set_background(fractions, self.loop.now)
        self._reschedule_network()

    def _background_loop(self) -> None:
        self._background()
        bg = self.scenario.network.background
        if bg.jitter and any(bg.fraction(t) for t in (1, 2, 3)):
            self.loop.after(bg.change_s, self._background_loop)

    def _refresh_oracle(self) -> None:
        if self.loop.now >= self.controller_back_at:  # a stopped controller serves nothing
            self._oracle = self._oracle.with_congestion(self.net.tier_congestion(),
                                                        self.loop.now)
        self.loop.after(self.scenario.oracle.refresh_s, self._refresh_oracle)

    # -- the control plane's engine (testbed/control/plane.py) ----------------------------
    def now(self) -> float:
        return self.loop.now

    def oracle_fresh(self) -> bool:
        return self._oracle.age(self.loop.now) <= self.scenario.recovery.oracle_max_age_s

    def oracle(self):
        return self.plane.view(self._oracle, self._oracle.age(self.loop.now))

    def slo(self, request_id: str) -> float:
        return self.workload.slo_for(request_id)

    def assign_transfer(self, rs: RequestState) -> None:
        self.decode[rs.decode].assign(rs, rs.hit_tokens // self.scenario.workload.block_tokens,
                                      kv_cache_bytes(self.model, rs.req.output_len))
        self.start_transfer(rs)

    def assign_local(self, rs: RequestState) -> None:
        self.decode[rs.decode].assign(rs, rs.hit_tokens // self.scenario.workload.block_tokens,
                                      kv_cache_bytes(self.model, rs.req.output_len))
        if self.plane.landed(rs, self.loop.now):
            self.decode[rs.decode].kv_landed(rs)

    def assign_recompute(self, rs: RequestState, seconds: float, ready_at: float) -> None:
        self.decode[rs.decode].assign(rs, 0, kv_cache_bytes(self.model, rs.req.output_len))
        self.loop.at(ready_at, lambda: self._kv_ready(rs))

    def ended(self, rs: RequestState) -> None:
        self._open -= 1

    # -- faults --------------------------------------------------------------------------
    def _fault(self, fault) -> None:
        now = self.loop.now
        self.faults_log.append({"time": now, "kind": fault.kind, "target": fault.target})
        back = now + fault.duration_s if fault.duration_s else None
        if fault.kind == "decode_down":
            self._decode_down(fault.target)
        elif fault.kind == "controller_down":
            self.controller_back_at = back if back is not None else float("inf")
        elif fault.kind == "background":
            self.bg_override[fault.tier] = fault.fraction
            self._background()
            if back is not None:
                self.loop.at(back, lambda: (self.bg_override.pop(fault.tier, None),
                                            self._background()))
        else:  # link_down | tor_down
            links = [(lk.a, lk.b) for lk in self.spec.links
                     if fault.target in (f"{lk.a}-{lk.b}", f"{lk.b}-{lk.a}")
                     or (fault.kind == "tor_down" and fault.target in (lk.a, lk.b))]
            self._links(links, up=False)
            if back is not None:
                self.loop.at(back, lambda: self._links(links, up=True))

    def _links(self, links, up: bool) -> None:
        for a, b in links:
            self.net.set_link(a, b, up, self.loop.now)
        self._reschedule_network()

    def _decode_down(self, name: str) -> None:
        self.failed.add(name)
        self.decode[name].fail()
        self.net.remove_flows(self.loop.now, lambda f: f.tag[1] == REUSE
                              and self.fetches[f.tag[0].req.request_id].holder == name)
        for rid, fetch in list(self.fetches.items()):
            if fetch.holder == name:
                del self.fetches[rid]
                tokens = round(fetch.size / kv_bytes_per_token(self.model))
                self.prefill[fetch.prefill].fetch_failed(rid, self.timing.prefill_per_token_s * tokens)
        self.net.remove_flows(self.loop.now, lambda f: f.tag[0].decode == name)
        self._reschedule_network()
        rc = self.scenario.recovery
        self.loop.after(rc.missed_heartbeats * rc.heartbeat_s, lambda: self._detected(name))

    def _detected(self, name: str) -> None:
        """The router's failure detector notices: flows into it stop, its requests recover."""
        self.net.remove_flows(self.loop.now, lambda f: f.tag[0].decode == name)
        self._reschedule_network()
        self.plane.declare_dead(name, self.states)

    def _sample_links(self) -> None:
        now = self.loop.now
        self.net.advance(now)
        measured = self.workload.warmup_s <= now - LINK_SAMPLE_S and now <= self._horizon
        links = self.net.link_list
        kv = np.fromiter((lk.kv_bytes for lk in links), float, len(links))
        bg = np.fromiter((lk.bg_bytes for lk in links), float, len(links))
        kv0, bg0 = self._last_sample
        self.links.add(round(now, 6), measured, (kv - kv0) / self._sample_bytes,
                       (bg - bg0) / self._sample_bytes)
        self._last_sample = (kv, bg)
        self.loop.after(LINK_SAMPLE_S, self._sample_links)

    # -- request path ------------------------------------------------------------------
    def _arrive(self, rs: RequestState) -> None:
        inst, plan = self.plane.place_prefill(rs, self.prefill, self.flowkv,
                                              self.scenario.reuse,
                                              self._prefer.get(rs.req.request_id))
        if plan is not None:
            self._fetch(rs, plan.holder, inst.jobs[rs.req.request_id].layer_s)

    def _hits(self, req, names) -> dict[str, int]:
        """Cached prefix tokens of `req` on those of `names` that hold its first block
        (every other instance has none: HolderIndex)."""
        if not req.hash_ids:
            return {}
        held = self.holders.holders(req.hash_ids[0])
        return {n: self.decode[n].cache.prefix_hit_tokens(req.hash_ids, req.input_len)
                for n in held if n in names}

    def prefix_hits(self, req) -> dict[str, int]:
        live = [d.name for d in self.decode.values() if d.name not in self.failed]
        hits = self._hits(req, set(live))
        return {n: hits.get(n, 0) for n in live}

    def _fetch(self, rs: RequestState, holder: str, layer_s: float) -> None:
        """Stage 1: the reusable prefix's KV from its holder to the prefill, as one flow."""
        size = kv_bytes_per_token(self.model) * rs.reuse_tokens
        tier = self.spec.tier(rs.prefill, holder)
        self.fetches[rs.req.request_id] = Fetch(holder, rs.prefill, tier, size,
                                                rs.prefill_start, layer_s)
        (path,) = self.net.transfer_paths(holder, rs.prefill, self.scenario.network.ecmp, 1)
        self.net.add_flow(path, size, self.loop.now, tag=(rs, REUSE), level=self._initial_level)
        if self.scenario.network.flow_policy != "fair":
            self._reprioritize(reschedule_tick=False)
        self._reschedule_network()

    def _fetched(self, rs: RequestState) -> None:
        fetch = self.fetches.pop(rs.req.request_id)
        self.reuse_bytes += fetch.size
        self.prefill[rs.prefill].fetched(rs.req.request_id)

    def candidates(self, req) -> CandidateTable:
        """Decode instances as the router sees them: all but those it knows are dead."""
        closed = self.flowkv.closed_decoders() if self.flowkv is not None else set()
        out = frozenset(self.plane.dead | closed)
        if self._live is None or self._live[0] != out:
            live = [d for d in self.decode.values() if d.name not in out]
            self._live = (out, tuple(d.name for d in live),
                          {d.name: i for i, d in enumerate(live)},
                          np.array([d.slot for d in live], dtype=np.int64))
        _, names, position, slots = self._live
        hit = np.zeros(len(names), dtype=np.int64)
        for name, tokens in self._hits(req, position).items():
            hit[position[name]] = tokens
        board = self.board
        return CandidateTable(names, board.free_memory[slots], board.queued[slots],
                              board.batch[slots], hit, index=position)

    def prefill_done(self, rs: RequestState) -> None:
        self.plane.prefilled(rs)

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
        """rs.eff_bytes from rs.prefill to rs.decode as TP parallel flows, now."""
        now = self.loop.now
        if rs.eff_bytes <= 0:
            self.loop.after(self._oracle.latency(rs.tier), lambda: self._transfer_done(rs))
            return
        shard = rs.eff_bytes / self.flows_per_transfer
        paths = self.net.transfer_paths(rs.prefill, rs.decode, self.scenario.network.ecmp,
                                        self.flows_per_transfer)
        flows = [self.net.add_flow(path, shard * len(ks), now, tag=(rs, ks),
                                   level=self._initial_level,
                                   shard=(ks[0], self.flows_per_transfer), share=False,
                                   streams=len(ks))
                 for path, ks in self._stream_groups(paths)]  # one re-sharing for all
        rs.flows_left = len(flows)
        self.net.recompute({hop for path in paths for hop in path}, changed=flows)
        if self.scenario.network.flow_policy != "fair":
            self._reprioritize(reschedule_tick=False)
        self._reschedule_network()

    def _stream_groups(self, paths: list) -> list[tuple[list, tuple[int, ...]]]:
        """A transfer's shards as network flows: under fair fluid sharing the shards on
        one path are one flow (they get equal rates and end together: exact, and a
        fraction of the work); with TCP windows or priority levels each is its own."""
        net = self.scenario.network
        if net.flow_model != "fluid" or net.flow_policy != "fair":
            return [(path, (k,)) for k, path in enumerate(paths)]
        groups: dict[tuple, list[int]] = {}
        for k, path in enumerate(paths):
            groups.setdefault(tuple(path), []).append(k)
        return [(paths[ks[0]], tuple(ks)) for ks in groups.values()]

    @property
    def _initial_level(self) -> int:
        """New flows start deferred at the bottom level (all at 0 under fair sharing)."""
        net = self.scenario.network
        return 0 if net.flow_policy == "fair" else mfs.initial_level(net.flow_policy,
                                                                      net.priority_levels)

    def _p2d_deadline(self, rs: RequestState) -> float:
        """A P2D transfer's explicit deadline: the TTFT deadline less the first decode
        iteration that must follow it (a full batch's, to be safe)."""
        return mfs.p2d_deadline(rs.req.arrival_s, self.workload.slo_for(rs.req.request_id),
                                self.timing.iteration_time(self.scenario.cluster.beta_max))

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
        now = self.loop.now
        for flow in self.net.pop_finished(now):
            rs, shards = flow.tag
            if shards == REUSE:
                self._fetched(rs)
                continue
            path = ">".join([flow.path[0][0]] + [h[1] for h in flow.path])
            for shard in shards:
                self.transfers.append({
                    "request": rs.req.request_id, "shard": shard, "src": rs.prefill,
                    "dst": rs.decode, "tier": rs.tier, "path": path,
                    "bytes": rs.eff_bytes / self.flows_per_transfer, "start": flow.start,
                    "end": now,
                })
            rs.flows_left -= 1
            if rs.flows_left == 0:
                delay = self._oracle.latency(rs.tier) + self._call_overhead(rs)
                self.loop.after(delay, lambda rs=rs: self._transfer_done(rs))
        self._reschedule_network()

    def _transfer_done(self, rs: RequestState) -> None:
        # False: aborted meanwhile, or a stale completion of an abandoned transfer
        if self.plane.landed(rs, self.loop.now):
            self.decode[rs.decode].kv_landed(rs)

    def _kv_ready(self, rs: RequestState) -> None:
        """Recomputed KV is in place on its target (unless the target died meanwhile:
        its detection recovers the request again)."""
        if rs.decode not in self.failed and self.plane.landed(rs, self.loop.now):
            self.decode[rs.decode].kv_landed(rs)

    def _completed(self, rs: RequestState) -> None:
        self._open -= 1

    # -- run ---------------------------------------------------------------------------
    def run(self) -> RunResult:
        wl = self.workload
        per_token = kv_bytes_per_token(self.model)
        for req in wl.requests:
            rs = new_request(req, wl.warmup_s, wl.measure_s, per_token)
            self.states.append(rs)
            self.loop.at(req.arrival_s, lambda rs=rs: self._arrive(rs))
        self._open = len(self.states)
        self._prewarm()
        last = max((r.arrival_s for r in wl.requests), default=0.0)
        self._horizon = wl.warmup_s + wl.measure_s
        self._background_loop()
        self._refresh_oracle()
        if self.flowkv is not None:
            self.flowkv.start()
        for fault in self.scenario.faults:
            self.loop.at(fault.at_s, lambda fault=fault: self._fault(fault))
        if self.scenario.network.flow_policy != "fair":
            self.loop.after(self.scenario.network.reprioritize_s, self._reprioritize)
        self.loop.at(LINK_SAMPLE_S, self._sample_links)
        self.loop.run(until=last + self.scenario.drain_s, stop=lambda: self._open == 0)
        self.net.advance(self.loop.now)  # bytes of flows still in flight, into level_bytes
        for rs in self.states:
            if rs.state is None:
                self.plane.end(rs, "failed", f"not finished {self.scenario.drain_s:g} s after "
                                             "the last arrival (drain limit)")
        return RunResult(
            requests=[request_row(rs, self.workload.slo_for(rs.req.request_id))
                      for rs in self.states],
            transfers=self.transfers,
            links=self.links,
            decision_us=self.plane.decision_us,
            events=self.loop.processed,
            sim_time_s=self.loop.now,
            counters=self.plane.counters(
                faults_injected=len(self.faults_log), level_bytes=self.net.level_bytes,
                reuse_bytes=self.reuse_bytes,
                prefill_stall_s=sum(p.stall_s for p in self.prefill.values()),
                pruned_requests=len(self.pruned), roles=self.flowkv),
        )


def simulate(scenario, scheduler_key: str, seed: int, workload: Workload,
             follow: Mapping[str, tuple[str, str]] | None = None) -> RunResult:
    return FlowSimulation(scenario, scheduler_key, seed, workload, follow).run()
