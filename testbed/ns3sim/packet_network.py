"""ns-3's packets behind the flow simulator's network seam (control/network_seam.py, which
the fluid network keeps too), so the flow engine's event loop, serving and control plane
run over them unchanged.

A flow is one shard's TCP stream, its bytes scaled to the replica's; ns-3 decides its
path (per-pair or per-flow ECMP, as the emulated switches do) and reports it when the
last byte lands. The simulator is run only as far as the next Python event
(`run_until`, driven by flowsim.events.DrivenLoop), so a shard's end returns control at
its exact instant; while no KV shard is in flight nothing can end, and the program is
not asked at all (it catches up with the next command, which carries its time). Link
counters are read when someone reads them: the oracle's congestion every refresh,
through the controller's own function (model/congestion.py), the link samples every
second, and the flows' bytes for MFS's re-prioritisation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from testbed.flowsim.links import Flow, byte_columns
from testbed.model.congestion import InterfaceRate, tier_congestion
from testbed.model.cost import gbps_to_bytes_per_s
from testbed.ns3sim.ns3_fabric import Hop, Ns3Fabric
from testbed.ns3sim.process import Ns3Process
from testbed.ns3sim.roce_facts import roce_facts
from testbed.topologies import routing
from testbed.topologies.replica import egress_kind, replica_record, scaled_bytes
from testbed.topologies.routing import PairPaths
from testbed.topologies.traffic_classes import KV, level_tos

CLASSES = ("control", "kv", "background")
# the emulation's shard header on the wire (workers/protocol.kv_header: magic, length and a
# JSON object naming request, shard, shards, bytes, keep): 77-92 bytes with the trace's ids
HEADER_BYTES = 84


@dataclass(slots=True)
class PacketLink:
    """A directed link as the flow engine's telemetry reads it: modelled bytes so far."""

    hop: Hop
    tier: int
    capacity: float  # modelled bytes/s
    index: int
    wire_bps: float  # the replica's configured rate
    kv_bytes: float = 0.0
    bg_bytes: float = 0.0  # everything that is not KV: the oracle's congestion
    down: bool = False


@dataclass(frozen=True)
class ShardStats:
    """What the sender's TCP said of one shard (the emulation's TCP_INFO fields)."""

    path: list[Hop]
    retrans_segs: int
    timeouts: int
    timeout_s: float
    rtt_s: float | None
    min_rtt_s: float | None


class PacketNetwork:
    def __init__(self, scenario, seed: int, program, clock: Callable[[], float]):
        self.layout = Ns3Fabric(scenario, seed)
        self.scale = self.layout.scale
        self.levels = scenario.kv_levels()
        self.header = HEADER_BYTES if "framing" in scenario.ns3.twin else 0
        self.clock = clock
        self.proc = Ns3Process(program)
        for line in self.layout.setup_lines():
            self.proc.send(line)
        self.proc.ask("ready")
        self.links: dict[Hop, PacketLink] = {}
        self.link_list: list[PacketLink] = []
        for hop, (lid, _side) in sorted(self.layout.directed.items(), key=lambda kv: kv[1]):
            fl = self.layout.links[lid]
            link = PacketLink(hop, fl.tier, gbps_to_bytes_per_s(fl.capacity_gbps),
                              len(self.link_list), fl.rate_bps)
            self.links[hop] = link
            self.link_list.append(link)
        self.flows: dict[int, Flow] = {}
        self.level_bytes: dict[int, float] = {}
        self.stats: dict[int, ShardStats] = {}  # finished shards' TCP, until taken
        self._wire: dict[int, int] = {}  # flow id -> its bytes on the replica's wire
        self._got: dict[int, int] = {}  # flow id -> wire bytes received when last read
        self._pushed: dict[int, tuple[int, float | None]] = {}  # (level, cap) ns-3 has
        self._finished: list[Flow] = []
        self._next_id = 0
        self._down: set = set()
        self._valleys = 0  # the most routes not up-down at once (RoCE: where pauses can cycle)
        self._notes: set[int] = set()  # flows that are notices, not KV bytes
        self._cycle: list[str] = []  # the first cycle of dependencies routes held (a>b hops)
        self._pairs = PairPaths(scenario.cluster.spec())
        self._counters: tuple[int, dict[Hop, tuple[int, ...]]] | None = None
        self._oracle_read: tuple[int, dict[Hop, tuple[int, ...]]] | None = None
        self._packets = {"hosts": 0, "hops": 0, "marked_ce": 0, "host_drops": 0,
                         "loss_probes": 0, "slow_start_restarts": 0, "relost_resent": 0}

    # -- time -------------------------------------------------------------------------
    @staticmethod
    def _ns(t: float) -> int:
        return round(t * 1e9)

    def run_until(self, t: float) -> float | None:
        """Simulate up to `t`; the instant a shard finished before it, or None."""
        if not self.flows:
            return None  # nothing can finish: ns-3 catches up with the next command
        lines = self.proc.ask(f"run {self._ns(t)}")
        ended = False
        for line in lines:
            words = line.split()
            if words[0] == "done":
                self._done(words)
                ended = True
            elif words[0] == "at":
                now = int(words[1]) / 1e9
        return now if ended else None

    def _done(self, words: list[str]) -> None:
        fid, end_ns, retx, timeouts, timeout_ns, srtt_ns, min_ns = map(int, words[1:8])
        flow = self.flows.pop(fid)
        flow.end = end_ns / 1e9
        wire = self._wire.pop(fid)
        if fid in self._notes:
            self._notes.discard(fid)  # not KV bytes
        else:
            self._count_level(flow, wire)
        self._got.pop(fid, None)
        self._pushed.pop(fid, None)
        flow.remaining = 0.0
        self.stats[fid] = ShardStats(self.layout.path_names(words[8]), retx, timeouts,
                                     timeout_ns / 1e9, srtt_ns / 1e9 or None,
                                     min_ns / 1e9 or None)
        self._finished.append(flow)

    def _count_level(self, flow: Flow, received: int) -> None:
        moved = (received - self._got.get(flow.flow_id, 0)) / self.scale
        if moved > 0:
            self.level_bytes[flow.level] = self.level_bytes.get(flow.level, 0.0) + moved
            self._got[flow.flow_id] = received

    def pop_finished(self, now: float) -> list[Flow]:
        done = [f for f in self._finished if f.end <= now + 1e-12]
        self._finished = [f for f in self._finished if f.end > now + 1e-12]
        return done

    def next_completion(self) -> float | None:
        return None  # ends arrive through run_until, at their instant

    # -- flows ------------------------------------------------------------------------
    def transfer_paths(self, src: str, dst: str, mode: str, flows: int) -> list[list[Hop]]:
        """The per-pair path (ns-3 takes it, or hashes each flow's 5-tuple per switch
        under per-flow ECMP, and says which it took when the shard ends)."""
        return [self._pairs.path(src, dst)] * flows

    def _tos(self, level: int) -> int:
        return KV.tos if not self.levels else level_tos(min(level, self.levels), self.levels)

    def add_flow(self, path: list[Hop], size: float, now: float, tag: object = None,
                 level: int = 0, shard: tuple[int, int] = (0, 1), share: bool = True,
                 streams: int = 1, group: object = None) -> Flow:
        if streams != 1:
            raise ValueError("on packets every shard is its own TCP stream")
        wire = scaled_bytes(size, self.scale) + self.header
        return self._start("flow", path, size, wire, now, tag, level, shard[0],
                           self._tos(level))

    def add_note(self, src: str, dst: str, size: int, now: float, tag: object,
                 conn: int) -> Flow:
        """A message nobody answers (the Transfer Engine's notice) of `size` bytes on the
        pair's connection `conn`, in the KV class: done at its last byte's arrival. Not
        scaled: the workers' line is its own size on every replica."""
        flow = self._start("note", self._pairs.path(src, dst), size, size, now, tag, 0, conn,
                           KV.tos)
        self._notes.add(flow.flow_id)
        return flow

    def _start(self, command: str, path: list[Hop], size: float, wire: int, now: float,
               tag: object, level: int, conn: int, tos: int) -> Flow:
        """A stream of `wire` bytes on the pair's connection `conn`, told to the program."""
        flow = Flow(self._next_id, path, size, size, now, tag, level, t0=now)
        self._next_id += 1
        self.flows[flow.flow_id] = flow
        self._wire[flow.flow_id] = wire
        self._pushed[flow.flow_id] = (level, None)
        self.proc.send(f"{command} {self._ns(now)} {flow.flow_id} {self.layout.ids[path[0][0]]} "
                       f"{self.layout.ids[path[-1][1]]} {wire} {conn} {tos}")
        return flow

    def recompute(self, touched: Iterable[Hop] | None = None,
                  changed: Iterable[Flow] | None = None) -> None:
        """Tell ns-3 the levels and rate caps that changed (MFS and its baselines); ns-3
        shares the links itself, so what arrived where (`touched`, `changed`) is moot."""
        now = self._ns(self.clock())
        for fid, flow in self.flows.items():
            level, cap = self._pushed[fid]
            if flow.level != level:
                self.proc.send(f"tos {now} {fid} {self._tos(flow.level)}")
            if flow.cap != cap:
                wire = 0 if flow.cap is None else max(1, round(flow.cap * self.scale))
                self.proc.send(f"pace {now} {fid} {wire}")
            self._pushed[fid] = (flow.level, flow.cap)

    def remove_flows(self, now: float, doomed: Callable[[Flow], bool]) -> list[Flow]:
        """Stop flows (their receiver died); their connections are not used again."""
        gone = [f for f in self.flows.values() if doomed(f)]
        for flow in gone:
            self.proc.send(f"abort {self._ns(now)} {flow.flow_id}")
            del self.flows[flow.flow_id]
            self._wire.pop(flow.flow_id)
            self._got.pop(flow.flow_id, None)
            self._pushed.pop(flow.flow_id)
            self._notes.discard(flow.flow_id)
        return gone

    def fail_host(self, name: str, now: float) -> None:
        """The instance stops answering: what is sent to it goes nowhere."""
        self.proc.send(f"hostdown {self._ns(now)} {self.layout.ids[name]}")

    # -- links and background -----------------------------------------------------------
    def set_link(self, a: str, b: str, up: bool, now: float) -> int:
        """A link fails or returns; the switches' routes are recomputed over the live
        links at once, as the controller reinstalls them."""
        if (a, b) not in self.layout.directed:
            return 0  # an NVLink bus: not part of the packet fabric
        lid, _ = self.layout.directed[(a, b)]
        key = frozenset((a, b))
        self._down = self._down - {key} if up else self._down | {key}
        for hop in ((a, b), (b, a)):
            self.links[hop].down = not up
        t = self._ns(now)
        self.proc.send(f"linkstate {t} {lid} {int(up)}")
        self.proc.send(f"clear {t}")
        for line in self.layout.route_lines(self._down):
            self.proc.send(line)
        table = routing.next_hops(self.layout.fabric, self._down)
        self._valleys = max(self._valleys, len(routing.valleys(self.layout.fabric, table)))
        if not self._cycle:
            cycle = routing.dependency_cycle(routing.dependencies(self.layout.fabric, table))
            self._cycle = [f"{a}>{b}" for a, b in cycle]
        return 0

    def set_stream(self, src: str, dst: str, bps: float, now: float,
                   until: float | None = None) -> None:
        """A paced background stream in the best-effort class (`until`: an extra one that
        stops then; else the pair's standing stream at a new rate, 0 stops it)."""
        ids = self.layout.ids
        tail = "" if until is None else f" {self._ns(until)}"
        self.proc.send(f"bg {self._ns(now)} {ids[src]} {ids[dst]} {bps:.0f}{tail}")

    # -- counters ---------------------------------------------------------------------
    def _read(self) -> tuple[int, dict[Hop, tuple[int, ...]]]:
        """Every directed link's class counters (wire bytes) and live shards' received
        bytes, at the loop's clock (read once per instant)."""
        now = self._ns(self.clock())
        if self._counters is not None and self._counters[0] == now:
            return self._counters
        counters: dict[Hop, tuple[int, ...]] = {}
        names = self.layout.links
        for line in self.proc.ask(f"counters {now}"):
            words = line.split()
            if words[0] == "c":
                link = names[int(words[1])]
                hop = (link.a, link.b) if words[2] == "0" else (link.b, link.a)
                counters[hop] = tuple(map(int, words[3:9]))
            elif words[0] == "p":
                self._packets = dict(zip(self._packets, map(int, words[1:]), strict=True))
            elif words[0] == "f":
                fid = int(words[1])
                flow = self.flows.get(fid)
                if flow is not None:
                    got = int(words[2])
                    self._count_level(flow, got)
                    flow.remaining = flow.size * max(0.0, 1 - got / self._wire[fid])
        self._counters = (now, counters)
        return self._counters

    def advance(self, now: float) -> None:
        """Bring links' byte counters and flows' remaining bytes to `now`."""
        _, counters = self._read()
        for hop, (ctl, kv, bg, *_drops) in counters.items():
            link = self.links[hop]
            link.kv_bytes = kv / self.scale
            link.bg_bytes = (ctl + bg) / self.scale

    def link_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """KV and background bytes every link has carried up to the last `advance`."""
        return byte_columns(self.link_list)

    def tier_congestion(self) -> dict[int, float]:
        """c_tier from the switches' egress counters since the last reading, as the
        controller's poller computes it (nothing before a second reading)."""
        now, counters = self._read()
        before, self._oracle_read = self._oracle_read, (now, counters)
        if before is None or now <= before[0]:
            return {}
        dt = (now - before[0]) / 1e9
        samples = []
        for hop, values in counters.items():
            if hop[0] in self.layout.fabric.hosts:
                continue
            prev = before[1][hop]
            bps = {c: max(0, values[i] - prev[i]) * 8 / dt for i, c in enumerate(CLASSES)}
            link = self.links[hop]
            samples.append(InterfaceRate(f"{hop[0]}>{hop[1]}", f"{hop[0]}>{hop[1]}",
                                         link.tier, link.wire_bps, bps))
        return tier_congestion(samples)

    def drops(self) -> dict[str, int]:
        """Packets the class queues dropped so far, per class, over every egress."""
        _, counters = self._read()
        return {c: sum(v[3 + i] for v in counters.values()) for i, c in enumerate(CLASSES)}

    def packets(self) -> dict[str, int]:
        """Packets put on a wire so far: by the hosts (segments, ACKs) and at every hop;
        KV packets marked CE (DCTCP); packets hosts dropped at their own NIC; tail loss
        probes sent, slow-start restarts and retransmissions found lost and sent again
        (ns3.twin)."""
        self._read()
        return dict(self._packets)

    def applied_replica(self) -> dict:
        """What the program built, read back from its objects (the emulation's
        applied_replica's shape: topologies/replica.replica_record)."""
        emu = self.layout.scenario.emulation
        hosts = self.layout.fabric.hosts
        egress: dict[str, set] = {}
        timers: dict[str, float] = {}
        rto = 0.0
        for line in self.proc.ask("replica"):
            words = line.split()
            if words[0] == "q":
                link = self.layout.links[int(words[1])]
                sender = link.a if words[2] == "0" else link.b
                depth = int(words[4]) // emu.frame_bytes if words[5] == "bytes" else int(words[4])
                egress.setdefault(egress_kind(sender in hosts, link.tier), set()).add(
                    (int(words[3]), depth))
            elif words[0] == "t":
                rto, *rest = (int(w) / 1e6 for w in words[1:5])
                timers = dict(zip(("delayed_ack", "tlp_min", "tsq_window"), rest, strict=True))
        return replica_record(egress, rto, timers, emu.frame_bytes, emu.queue_limit)

    def roce(self) -> dict:
        """RoCE's record of the run (roce_facts)."""
        return roce_facts(self.proc.ask(f"pfc {self._ns(self.clock())}"), self.layout.hop_of,
                          self._valleys, self._cycle)

    def close(self) -> None:
        self.proc.close()
