"""One ns-3 run: the flow engine's run (arrivals, serving, the control plane, faults and
the oracle, unchanged) with its transfers on ns-3's packets instead of the fluid network.

What differs is only what packets decide: a KV transfer is its TP shards' TCP streams
from the prefill's NIC (each its own stream, never merged), it lands when its last shard's
last byte does (latency and queueing are in the packets: nothing is added), each shard's
row keeps its sender's TCP counters and the path its packets took; background is the
emulation's (a paced stream per instance and tier to its partner, surges added on top,
`network.background.jitter` moving each stream's rate every `change_s`); a failed decode
instance stops answering.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Mapping

from testbed.flowsim.events import DrivenLoop
from testbed.flowsim.simulator import FlowSimulation, RunResult, collector_paused
from testbed.flowsim.transfers import NOTICE, lands_at_notice
from testbed.lifecycle import RequestState
from testbed.metrics import tcp_stalls
from testbed.ns3sim.ns3_fabric import transport_of
from testbed.ns3sim.packet_network import PacketNetwork
from testbed.ns3sim.program import ns3_version, program_path
from testbed.topologies.replica import background_partner
from testbed.topologies.routing import packet_ecmp, path_text
from testbed.topologies.traffic_classes import engine_notice_bytes
from testbed.workloads.build import Workload

BIG = 1e9  # seconds: a surge without an end


def background_plan(scenario) -> list[tuple[str, str, int, float]]:
    """(src, dst, tier, fraction): every instance's standing stream per tier to its
    partner, at the tier's fraction of the tier's per-path rate, as the emulation's
    workers send it."""
    bg, spec = scenario.network.background, scenario.cluster.spec()
    out = []
    for inst in spec.instances:
        for tier in (1, 2, 3):
            f = bg.fraction(tier)
            other = background_partner(spec, inst.name, tier) if f > 0 else None
            if other is not None:
                out.append((inst.name, other, tier, f))
    return out


def stream_bps(spec, fraction: float, tier: int, scale: float) -> float:
    return fraction * spec.tier_bandwidth_gbps[tier] * 1e9 * scale


class Ns3Simulation(FlowSimulation):
    COALESCE_ITERATIONS = True
    net: PacketNetwork  # the SimulatedNetwork, with ns-3's own calls besides

    def __init__(self, scenario, scheduler_key: str, seed: int, workload: Workload,
                 follow: Mapping[str, tuple[str, str]] | None = None, program=None):
        self._program = program or program_path()
        super().__init__(scenario, scheduler_key, seed, workload, follow)
        self.loop.run_until = self.net.run_until
        self.loop.on_network = self._finish_flows
        self._notices = lands_at_notice(scenario)
        self._notice_bytes = engine_notice_bytes(self.flows_per_transfer)

    def _event_loop(self) -> DrivenLoop:
        return DrivenLoop()

    def _network(self, seed: int) -> PacketNetwork:
        return PacketNetwork(self.scenario, seed, self._program, clock=lambda: self.loop.now)

    # -- transfers ------------------------------------------------------------------------
    def _stream_groups(self, shards: list[tuple[int, list]]) -> list[tuple[list, tuple[int, ...]]]:
        return [(path, (k,)) for k, path in shards]

    def _lanes(self) -> int:
        return 0  # the program keeps the engine's lanes itself (a lane frees at the reply)

    def _record_shards(self, rs: RequestState, flow, shards: tuple, now: float) -> None:
        tcp = self.net.stats.pop(flow.flow_id)
        for shard in shards:
            self.transfers.append({
                "request": rs.req.request_id, "shard": shard, "src": rs.prefill,
                "dst": rs.decode, "tier": rs.tier, "path": path_text(tcp.path),
                "bytes": rs.eff_bytes / self.flows_per_transfer, "start": flow.start,
                "end": now, "retrans_segs": tcp.retrans_segs, "timeouts": tcp.timeouts,
                "timeout_s": tcp.timeout_s, "rtt_s": tcp.rtt_s, "min_rtt_s": tcp.min_rtt_s,
                "cpu_wait_s": None,
            })

    def _all_shards_in(self, rs: RequestState) -> None:
        if not self._notices:
            self._transfer_done(rs)
            return
        # the engine's writes completed, each at the target's acknowledgement (the
        # framing twin's reply); the decode side learns of it from the prefill's notice,
        # on a kept connection of its own, and lands the transfer at its arrival
        self.net.add_note(rs.prefill, rs.decode, self._notice_bytes, self.loop.now,
                          (rs, NOTICE), conn=self.flows_per_transfer)

    def _finish_flows(self) -> None:
        super()._finish_flows()
        self.net.stats.clear()  # what no shard's row took: KV-reuse fetches

    # -- background and faults --------------------------------------------------------------
    def _background(self) -> None:
        """The standing streams, each moved by the jitter."""
        jitter = self.scenario.network.background.jitter
        for src, dst, tier, f in background_plan(self.scenario):
            if jitter:
                f *= 1.0 + jitter * self.rng.uniform(-1.0, 1.0)
            self.net.set_stream(src, dst, self._stream_bps(f, tier), self.loop.now)

    def _stream_bps(self, fraction: float, tier: int) -> float:
        return stream_bps(self.spec, fraction, tier, self.net.scale)

    def _fault(self, fault) -> None:
        if fault.kind != "background":
            super()._fault(fault)
            return
        now = self.loop.now  # a surge: one more stream per instance, as the emulation's
        self.faults_log.append({"time": now, "kind": fault.kind, "target": fault.target})
        until = now + (fault.duration_s or BIG)
        for inst in self.spec.instances:
            other = background_partner(self.spec, inst.name, fault.tier)
            if other is not None and fault.fraction > 0:
                self.net.set_stream(inst.name, other, self._stream_bps(fault.fraction,
                                                                       fault.tier), now, until)

    def _decode_down(self, name: str) -> None:
        self.net.fail_host(name, self.loop.now)
        super()._decode_down(name)

    # -- run --------------------------------------------------------------------------------
    def release(self) -> None:
        self.net.close()
        super().release()

    def engine_facts(self) -> dict:
        """What ns-3 simulated (ns3.json): the same for the same scenario and seed."""
        layout = self.net.layout
        settings = layout.settings()
        queues = {}
        for link in layout.links:
            queues.setdefault(str(link.tier), layout.queue(link))
        return {"engine": "ns3", "ns3": ns3_version(), "scale": layout.scale,
                "line_rate": layout.scale == 1.0, "transport": transport_of(self.scenario),
                "ecmp": packet_ecmp(self.scenario.network.ecmp),
                "socket_buffer_bytes": settings["sndbuf"], "mss_bytes": settings["mss"],
                "rto_min_s": settings["rto_min_ns"] / 1e9, "ecn_k_packets": settings["ecn_k"],
                "queue_packets": queues, "queue_limit": settings["queue_limit"],
                "kv_connections": settings["connections"], "kv_levels": settings["levels"],
                "delayed_ack_s": settings["delack_ns"] / 1e9,
                "twin": list(self.scenario.ns3.twin),
                "twin_dilation": self.scenario.ns3.twin_dilation,
                "drops": self.net.drops(), "packets": self.net.packets(),
                "replica": self.net.applied_replica()} | (
                    {"roce": self.net.roce()} if settings["transport"] == "roce" else {})


def simulate(scenario, scheduler_key: str, seed: int, workload: Workload,
             follow: Mapping[str, tuple[str, str]] | None = None) -> RunResult:
    """One cell on ns-3 (builds the program on first use)."""
    program = program_path()
    wall0, cpu0, child0 = time.perf_counter(), time.process_time(), _children_cpu()
    with collector_paused():
        sim = Ns3Simulation(scenario, scheduler_key, seed, workload, follow, program)
        try:
            result = sim.run()
            result.engine = sim.engine_facts()
            rss = sim.net.proc.peak_rss_kb()
            asks = sim.net.proc.requests
        finally:
            sim.release()
    result.counters.update({  # what the run cost (not part of the repeatable records)
        "engine_wall_s": time.perf_counter() - wall0,
        "engine_python_cpu_s": time.process_time() - cpu0,
        "engine_ns3_cpu_s": _children_cpu() - child0,
        "engine_ns3_peak_rss_mb": (rss or 0) / 1024, "engine_ns3_requests": asks,
        "engine_packets": result.engine["packets"]["hops"],
    })
    result.counters.update({f"tcp_{k}": v for k, v in tcp_stalls(result.transfers).items()
                            if k != "timeouts_known"})  # as the emulation's summary has
    return result


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the ns-3 program, once waited)."""
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return child.ru_utime + child.ru_stime
