"""One flow-level run: a scenario cell, one scheduler, one seed -> run records.

Arrival -> prefill (FIFO, least work left) -> scheduler decision at prefill completion,
on what a real router sees (instance reports now, oracle as of its last refresh) -> KV
transfer as TP parallel flows from the prefill NIC over ECMP paths, max-min fair ->
admission at an iteration boundary -> output tokens -> completion.

This module keeps a run's set-up, arrivals, decisions and the engine interface the
control plane calls; its transfers (transfers.py), faults (faults.py), prefix fetches
(reuse_fetch.py) and background, oracle and link samples (telemetry.py) sit beside it.
"""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from testbed.control.network_seam import SimulatedNetwork
from testbed.control.plane import ControlPlane, scenario_scheduler
from testbed.flowsim.events import EventLoop
from testbed.flowsim.faults import FaultEvents
from testbed.flowsim.flowkv_control import FlowKVControl
from testbed.flowsim.model_network import flow_network
from testbed.flowsim.network import FluidNetwork
from testbed.flowsim.pair_lanes import Lanes
from testbed.flowsim.reuse_fetch import Fetch, PrefixFetch
from testbed.flowsim.telemetry import LINK_SAMPLE_S, NetworkTelemetry
from testbed.flowsim.transfers import TransferPlane
from testbed.lifecycle import RequestState, new_request, request_row
from testbed.model.cache import HolderIndex
from testbed.model.candidates import CandidateTable
from testbed.model.extensions import compiled_cache
from testbed.model.extensions.compiled_cache import CompiledHolderIndex
from testbed.model.follow import Followed
from testbed.model.kv import kv_bytes_per_token, kv_cache_bytes
from testbed.model.oracle import Oracle
from testbed.model.schedulers import switches_roles
from testbed.records import LinkSamples
from testbed.serving import DecodeBoard, DecodeInstance, PrefillInstance
from testbed.workloads.build import Workload, prewarm_placement

GB = 1e9


@dataclass
class RunResult:
    requests: list[dict]
    transfers: list[dict]
    links: LinkSamples  # iterates as links.csv rows
    decision_us: list[float] = field(default_factory=list)
    events: int = 0
    sim_time_s: float = 0.0
    counters: dict = field(default_factory=dict)  # faults and recovery, for summary.json
    engine: dict = field(default_factory=dict)  # what a packet engine simulated (ns3.json)


class FlowSimulation(NetworkTelemetry, FaultEvents, PrefixFetch, TransferPlane):
    COALESCE_ITERATIONS = True  # decode instances skip iterations where nothing happens

    def __init__(self, scenario, scheduler_key: str, seed: int, workload: Workload,
                 follow: Mapping[str, tuple[str, str]] | None = None):
        """`follow`: request id -> (prefill, decode) placements recorded elsewhere (the
        packets'), taken instead of this run's own wherever they are possible."""
        self.scenario = scenario
        self.workload = workload
        self.loop = self._event_loop()
        self._seed = seed
        self.rng = random.Random(seed * 7919 + 17)
        self.spec = scenario.cluster.spec()
        self.model = scenario.model_spec()
        self.timing = scenario.timing_model()
        cluster = scenario.cluster
        self.net: SimulatedNetwork = self._network(seed)
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
        self._deadlines: dict[str, float] = {}  # request -> its P2D deadline, once
        # which decode caches hold a trace id's blocks; the caches compiled where they can be
        self.holders = CompiledHolderIndex() if compiled_caches(workload) else HolderIndex()
        # what the router sees of every decode instance
        self.board = DecodeBoard(scenario.cluster.beta_max)
        self.decode = {i.name: self.new_decoder(i.name) for i in self.spec.decode_pool}
        self._live: tuple | None = None  # (left out, live names, their rows, board slots)
        self.flows_per_transfer = scenario.network.flows_per_transfer or self.spec.tp
        self._oracle = Oracle(
            tier_map=self.spec.all_tiers if switches_roles(scheduler_key) else self.spec.tier_map,
            tier_bandwidth_gbps=self.spec.tier_bandwidth_gbps,
            tier_latency_us=self.spec.tier_latency_us,
            congestion={},
            generated_at=0.0,
        )
        self.states: list[RequestState] = []
        self.transfers: list[dict] = []
        self._ledger = Lanes(self._lanes(), first_alone=True)  # the engine's, per pair
        self._lane_group: dict[str, object] = {}  # request -> its transfer's streams
        self._submitted: dict[int, float] = {}  # flow id -> its shards' hand-over, if they waited
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

    def _event_loop(self) -> EventLoop:
        return EventLoop()

    def _network(self, seed: int) -> FluidNetwork:
        """The network the transfers run on: max-min or the scenario's network model (an
        engine over packets puts its own here: any control/network_seam.SimulatedNetwork)."""
        net = self.scenario.network
        return flow_network(self.spec, random.Random(seed * 104729 + 3), net.capacity_factor,
                            self.scenario.tcp_params(), net.tcp.rtt_exponent, net.model,
                            self.scenario.scheduler_timeout_ms / 1e3)

    def new_decoder(self, name: str) -> DecodeInstance:
        """A decode engine on instance `name` (every decode instance; a prefill instance
        once FlowKV switches it to decode work)."""
        cluster, block_tokens = self.scenario.cluster, self.scenario.workload.block_tokens
        block_bytes = kv_bytes_per_token(self.model) * block_tokens
        self._live = None  # the candidate set changes
        return DecodeInstance(name, self.loop, self.timing, cluster.beta_max,
                              cluster.memory_gb * GB,
                              self.holders.cache(block_tokens, block_bytes, name),
                              self._completed, board=self.board,
                              coalesce=self.COALESCE_ITERATIONS)

    # -- setup -------------------------------------------------------------------------
    def _prewarm(self) -> None:
        placed = prewarm_placement(self.workload.history, sorted(self.decode), self._seed)
        for name, reqs in placed.items():
            self.decode[name].prewarm(reqs)

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

    # -- request path ------------------------------------------------------------------
    def _arrive(self, rs: RequestState) -> None:
        inst, plan = self.plane.place_prefill(rs, self.prefill, self.flowkv,
                                              self.scenario.reuse,
                                              self._prefer.get(rs.req.request_id))
        if plan is not None:
            self._fetch(rs, plan.holder, inst.jobs[rs.req.request_id].layer_s)

    def candidates(self, req) -> CandidateTable:
        """Decode instances as the router sees them: all but those it knows are dead."""
        closed = self.flowkv.closed_decoders() if self.flowkv is not None else set()
        out = frozenset(self.plane.dead | closed)
        if self._live is None or self._live[0] != out:
            live = [d for d in self.decode.values() if d.name not in out]
            slots = np.array([d.slot for d in live], dtype=np.int64)
            if len(slots) and np.array_equal(slots, np.arange(slots[0], slots[0] + len(slots))):
                slots = slice(int(slots[0]), int(slots[0]) + len(slots))  # a copy, no gather
            self._live = (out, tuple(d.name for d in live),
                          {d.name: i for i, d in enumerate(live)}, slots)
        _, names, position, slots = self._live
        hit = np.zeros(len(names), dtype=np.int64)
        rows = []
        for name, tokens in self._hits(req, position).items():
            if tokens:
                rows.append(position[name])
                hit[rows[-1]] = tokens
        rows.sort()
        return self.board.table(names, slots, hit, position, np.array(rows, dtype=np.int64))

    def prefill_done(self, rs: RequestState) -> None:
        self.plane.prefilled(rs)

    def _completed(self, rs: RequestState) -> None:
        self._open -= 1

    # -- run ---------------------------------------------------------------------------
    def release(self) -> None:
        """Drop the run's state now that its records are out. The state is one web of
        references (the event heap's callbacks, the instances and this simulation), so
        without this only the cyclic collector frees it, by tracing millions of objects."""
        vars(self).clear()

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
                pruned_requests=len(self.pruned), roles=self.flowkv) | self._model_faults(),
        )

    def _model_faults(self) -> dict:
        """A network-model plugin's faults under its guard, for summary.json."""
        faults = getattr(self.net, "faults", None)
        report = faults() if faults else None
        return {"network_model_faults": report} if report is not None else {}


def compiled_caches(workload: Workload) -> bool:
    """Whether this run's prefix caches are the compiled ones: unless NETKV_FLOWSIM_NATIVE
    is 0 (the Python reference for every compiled part of the flow simulator), where they
    build, and where every trace id fits 64 bits."""
    if os.environ.get("NETKV_FLOWSIM_NATIVE", "1") == "0" or not compiled_cache.available():
        return False
    return all(compiled_cache.fits(r.hash_ids) for r in (*workload.requests, *workload.history))


def simulate(scenario, scheduler_key: str, seed: int, workload: Workload,
             follow: Mapping[str, tuple[str, str]] | None = None) -> RunResult:
    with collector_paused():
        sim = FlowSimulation(scenario, scheduler_key, seed, workload, follow)
        try:
            return sim.run()
        finally:
            sim.release()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector off for one run, back as it was after.

    A run's state (caches, flows, requests) lives until the run ends, and the run makes
    next to no cyclic garbage on the way (peak RSS the same with the collector off), yet
    the collector's full passes re-scan that whole heap every time it grows by a quarter:
    30% of the wall time at 8192 GPUs x 60 s (docs/benchmarks.md). Whatever cyclic
    garbage the run did make is collected as before, after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
