"""The fabric as ns-3 builds it, from the same `Fabric` the emulation builds: pure.

Hosts are the instances (one NIC each), switches the fat-tree's, links the fabric's
(NVLink buses are not emulated: same-server instances talk through their ToR, as on the
emulated fabric). Each link keeps its tier's rate x the replica's scale (no time
dilation: a simulator has no CPU to run short of) and a one-way delay that makes a tier-k
path's latency the scenario's tier latency. Every egress gets the emulation's class queues
at the emulation's depth. Routes are `routing.next_hops` over the live links, the ports
of a destination in the order the per-pair hash indexes them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from functools import cached_property

from testbed.control.network_seam import Hop
from testbed.model.tcp import SEGMENT_OVERHEAD, payload_share, wire_mss
from testbed.topologies.fabric import Fabric, FabricLink
from testbed.topologies.replica import QUEUE_S, leaf_packets, rto_min_ms, wall_timers_ms
from testbed.topologies.routing import LinkKey, link_key, next_hops, packet_ecmp
from testbed.topologies.traffic_classes import kv_lanes

TRANSPORTS = {"cubic": "cubic", "reno": "newreno", "bbr": "bbr", "system": "cubic"}
LINUX_INIT_CWND = 10  # segments (RFC 6928, Linux's default)
MAX_BUFFER = 64 * 2**20
HTB_WIRE = 100  # twin "htb": the devices this much faster than the link's shaped rate (a
# veth and a switch's forwarding, which the emulation's HTB feeds, are not rate-limited)
WIRE_HEADERS = 42  # bytes of a data segment on a point-to-point link besides its payload:
# IPv4 and TCP (20 + 20, no timestamps: docs/ns3.md) and PPP's 2


def counts_frames(scenario) -> bool:
    """Whether ns-3's links count the emulation's Ethernet frame for a segment (the twin's
    "frames" or "htb") rather than its own 26-byte-shorter one (PPP, no TCP timestamps)."""
    return bool({"frames", "htb"} & set(scenario.ns3.twin))


def wire_payload_share(scenario) -> float:
    """What share of a link's rate a full KV segment's payload gets on ns-3's wire."""
    return payload_share(scenario.emulation.frame_bytes,
                         SEGMENT_OVERHEAD if counts_frames(scenario) else WIRE_HEADERS)


def wire_over_link(scenario) -> float:
    """The devices' rate over the link's: HTB_WIRE under twin "htb" (the queues shape and
    count the frame); under "frames" a full segment's bytes here over the emulation's
    frame, so that both take one frame's time; else 1 (and under RoCE, which has no
    emulated twin: its packets are their own frames)."""
    frame = scenario.emulation.frame_bytes
    if transport_of(scenario) == "roce":
        return 1.0
    if "htb" in scenario.ns3.twin:
        return HTB_WIRE
    if counts_frames(scenario):
        return (wire_mss(frame) + WIRE_HEADERS) / frame
    return 1.0


def link_delays_s(tier_latency_us: dict[int, float]) -> dict[int, float]:
    """One-way delay per link of each tier such that a tier-k path (two links of every
    tier up to k) adds up to the tier's latency."""
    out, below = {}, 0.0
    for tier in (1, 2, 3):
        total = tier_latency_us.get(tier, 0.0) * 1e-6
        out[tier] = max(0.0, (total - below) / 2)
        below = max(below, total)
    return out


def transport_of(scenario) -> str:
    """The TCP of the KV and background streams: ns3.transport, or the emulation's."""
    chosen = scenario.ns3.transport
    return TRANSPORTS[scenario.emulation.tcp_congestion] if chosen == "auto" else chosen


def roce_settings(roce, scale: float) -> dict[str, object]:
    """The program's RoCE settings at the replica's scale. Rates scale with it. With
    `roce.timers: scaled` (the default) every time is 1/scale longer and every byte count
    stays: a packet, a cut, an increase step and a marking threshold are what they are on
    the real fabric, in time slowed by 1/scale (only the links' latency stays absolute, as
    for TCP here). With `absolute` the times stay and the byte counter scales: the real
    timers beside a replica's long frames, a regime of its own below about 1e-2."""
    ns, byte = 1e3, 1e3  # us -> ns, KB -> bytes
    slow = 1 / scale if roce.timers == "scaled" else 1.0
    counter = roce.byte_counter_mb * 1e6 * (1.0 if roce.timers == "scaled" else scale)
    xoff = roce.pfc_xoff_kb * byte
    return {
        "roce_mtu": roce.mtu_bytes, "roce_kmin": roce.kmin_kb * byte,
        "roce_kmax": roce.kmax_kb * byte, "roce_pmax": roce.pmax, "roce_g": roce.g,
        "roce_cnp_ns": round(roce.cnp_interval_us * ns * slow),
        "roce_alpha_ns": round(roce.alpha_timer_us * ns * slow),
        "roce_rate_ns": round(roce.rate_timer_us * ns * slow),
        "roce_byte_counter": counter,
        "roce_fast_recovery": roce.fast_recovery, "roce_rai": roce.rai_mbps * 1e6 * scale,
        "roce_rhai": roce.rhai_mbps * 1e6 * scale,
        "roce_min_rate": roce.min_rate_mbps * 1e6 * scale, "roce_ack_every": roce.ack_every,
        "roce_nak_ns": round(roce.nak_interval_us * ns * slow),
        "roce_timeout_ns": round(roce.timeout_ms * 1e6 * slow), "roce_xoff": xoff,
        "roce_xon": max(0.0, xoff - roce.pfc_resume_kb * byte),
        "roce_watchdog_ns": round(roce.watchdog_ms * 1e6 * slow),
        "roce_restore_ns": round(roce.restore_ms * 1e6 * slow),
    }


def socket_buffer(scenario, fabric: Fabric) -> int:
    """ns3.socket_buffer_bytes, else room for four of the fastest NIC's queues: a window
    that can fill its path's queues, not one a SACK scoreboard drags."""
    if scenario.ns3.socket_buffer_bytes is not None:
        return scenario.ns3.socket_buffer_bytes
    nic = max(lk.rate_bps for lk in fabric.links if lk.a in fabric.hosts)
    return int(min(MAX_BUFFER, max(128 * 1024, 4 * nic / 8 * QUEUE_S)))


@dataclass
class Ns3Fabric:
    """Node and link numbering (what kvnet/main.cc's commands say) and the set-up lines."""

    scenario: object
    seed: int
    fabric: Fabric = field(init=False)

    def __post_init__(self) -> None:
        emu = self.scenario.emulation
        self.scale = self.scenario.ns3.scale or emu.scale
        self.fabric = Fabric(self.scenario.cluster.spec(), self.scale, 1.0)

    @cached_property
    def names(self) -> list[str]:
        """Node id -> name: the hosts in instance order, then the switches."""
        return list(self.fabric.hosts) + list(self.fabric.switches)

    @cached_property
    def ids(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    @cached_property
    def links(self) -> tuple[FabricLink, ...]:
        return self.fabric.links

    @cached_property
    def directed(self) -> dict[Hop, tuple[int, int]]:
        """(a, b) -> (link id, side): side 0 is the link's a end sending toward b."""
        out = {}
        for i, lk in enumerate(self.links):
            out[(lk.a, lk.b)] = (i, 0)
            out[(lk.b, lk.a)] = (i, 1)
        return out

    def hop_of(self, link_id: int, side: int) -> Hop:
        """The program's (link id, side) as the hop its egress sends on."""
        link = self.links[link_id]
        return (link.a, link.b) if side == 0 else (link.b, link.a)

    def queue(self, link: FabricLink) -> int:
        return leaf_packets(link, self.scenario.emulation)

    def ecn_k(self) -> int:
        if transport_of(self.scenario) != "dctcp":
            return 0
        if self.scenario.ns3.ecn_k_packets is not None:
            return self.scenario.ns3.ecn_k_packets
        return max(2, min(self.queue(lk) for lk in self.links) // 4)

    def settings(self) -> dict[str, object]:
        scenario, emu = self.scenario, self.scenario.emulation
        buffer = socket_buffer(scenario, self.fabric)
        rto_ms = scenario.ns3.rto_min_ms if scenario.ns3.rto_min_ms is not None else rto_min_ms(emu)
        wall = wall_timers_ms(scenario.ns3.twin_dilation)
        delack = scenario.ns3.delayed_ack_ms
        delack = wall["delayed_ack"] if delack is None else delack
        return {
            "transport": transport_of(scenario), "mss": emu.frame_bytes - SEGMENT_OVERHEAD,
            "sndbuf": buffer, "rcvbuf": buffer, "rto_min_ns": round(rto_ms * 1e6),
            "delack_ns": round(delack * 1e6), "init_cwnd": LINUX_INIT_CWND,
            "seed": self.seed + 1, "ecmp": packet_ecmp(scenario.network.ecmp),
            "queue_limit": emu.queue_limit, "frame": emu.frame_bytes, "ecn_k": self.ecn_k(),
            "connections": emu.kv_connections,
            "lanes": kv_lanes(emu.kv_transport, emu.kv_connections),
            "levels": scenario.kv_levels(),
            "kv_port": emu.kv_port, "jitter_ns": round(scenario.ns3.start_jitter_us * 1e3),
            "jitter_seed": scenario.ns3.jitter_seed, "twin": ",".join(scenario.ns3.twin) or "none",
            "tlp_min_ns": round(wall["tlp_min"] * 1e6),
            "tsq_window_ns": round(wall["tsq_window"] * 1e6),
            "wire": wire_over_link(scenario),
        } | (roce_settings(scenario.ns3.roce, self.scale)
             if transport_of(scenario) == "roce" else {})

    def setup_lines(self) -> list[str]:
        lines = [f"set {k} {v}" for k, v in self.settings().items()]
        for name in self.fabric.hosts:
            lines.append(f"host {self.fabric.hosts[name].ip}")
        for name in self.fabric.switches:  # salted per switch, and per seed as ports are
            lines.append(f"switch {zlib.crc32(name.encode()) ^ (self.seed * 2654435761 % 2**32)}")
        delays = link_delays_s(self.fabric.spec.tier_latency_us)
        for lk in self.links:
            lines.append(f"link {self.ids[lk.a]} {self.ids[lk.b]} {lk.rate_bps:.0f} "
                         f"{round(delays[lk.tier] * 1e9)} {self.queue(lk)}")
        return lines + self.route_lines(set())

    def route_lines(self, down: set[LinkKey]) -> list[str]:
        """Every switch's routes over the links that are up."""
        table = next_hops(self.fabric, down)
        ports = self.fabric.switch_ports
        index = {link_key(lk): i for i, lk in enumerate(self.links)}
        lines = []
        for switch, routes in table.items():
            for dst, outs in routes.items():
                ids = " ".join(str(index[link_key(ports[(switch, p)])]) for p in outs)
                lines.append(f"route {self.ids[switch]} {self.ids[dst]} {ids}")
        return lines

    def path_names(self, path: str) -> list[Hop]:
        """kvnet's path (node ids a>b>c) as hops between names."""
        nodes = [self.names[int(i)] for i in path.split(">")]
        return list(zip(nodes[:-1], nodes[1:], strict=True))
