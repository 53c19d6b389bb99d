"""The emulated fabric derived from a FatTreeSpec: switches, DPIDs, ports, addresses, rates.

Pure: the Mininet topology, the controller and the tc setup all compute the same ports
and rates from here, so nothing is described twice.

Choices: one Mininet host per *instance* (an instance owns a NIC in the spec, so a host
is the thing that sends and receives KV). NVLink buses (tier 0) are not emulated:
same-server instances talk through their ToR, at tier-1 rates; the paper's placement
never uses tier 0. Every link rate is the modelled capacity x `scale` / `dilation`, so
transfer times keep their modelled values when byte counts are scaled by `scale` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from testbed.clock import Dilation
from testbed.topologies.fattree import FatTreeSpec

DPID_BASE = {"tor": 0x1000, "agg": 0x2000, "core": 0x3000}


@dataclass(frozen=True)
class FabricLink:
    a: str
    b: str
    port_a: int  # OpenFlow port on a (0 when a is a host: its only interface, eth0)
    port_b: int
    tier: int
    capacity_gbps: float  # modelled
    rate_bps: float  # emulated (scaled, dilated): bits per wall second
    replica_bps: float  # scaled only: bits per modelled second, the same at any dilation

    def port_of(self, node: str) -> int:
        return self.port_a if node == self.a else self.port_b

    def peer_of(self, node: str) -> str:
        return self.b if node == self.a else self.a

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str
    tor: str
    tor_port: int


class Fabric:
    def __init__(self, spec: FatTreeSpec, scale: float, dilation: float = 1.0):
        if not 0 < scale <= 1:
            raise ValueError(f"scale must be in (0, 1], got {scale}")
        if dilation < 1:
            raise ValueError(f"time dilation must be >= 1, got {dilation}")
        self.spec = spec
        self.scale = scale
        self.dilation = dilation

    def rate_bps(self, gbps: float) -> float:
        return Dilation(self.dilation).wall_rate(gbps * 1e9 * self.scale)

    @cached_property
    def switches(self) -> dict[str, str]:
        """Switch name -> 16-hex-digit DPID, stable from the name."""
        out = {}
        for layer, names in self.spec.switches.items():
            for name in names:
                index = int(name[len(layer):])
                out[name] = f"{DPID_BASE[layer] + index:016x}"
        return out

    @cached_property
    def dpid_to_switch(self) -> dict[int, str]:
        return {int(d, 16): name for name, d in self.switches.items()}

    @cached_property
    def links(self) -> tuple[FabricLink, ...]:
        next_port: dict[str, int] = dict.fromkeys(self.switches, 1)
        out = []
        for link in self.spec.links:
            if link.tier == 0:
                continue
            ports = []
            for node in (link.a, link.b):
                if node in next_port:
                    ports.append(next_port[node])
                    next_port[node] += 1
                else:
                    ports.append(0)
            out.append(FabricLink(link.a, link.b, ports[0], ports[1], link.tier,
                                  link.capacity_gbps, self.rate_bps(link.capacity_gbps),
                                  link.capacity_gbps * 1e9 * self.scale))
        return tuple(out)

    @cached_property
    def hosts(self) -> dict[str, Host]:
        out = {}
        for k, inst in enumerate(self.spec.instances):
            tor = self.spec.tor(inst.rack)
            link = next(lk for lk in self.links if lk.a == inst.name and lk.b == tor)
            out[inst.name] = Host(
                name=inst.name,
                ip=f"10.0.{k // 250}.{k % 250 + 1}",
                mac=f"02:00:00:00:{k >> 8:02x}:{k & 0xFF:02x}",
                tor=tor,
                tor_port=link.port_b,
            )
        return out

    @cached_property
    def host_by_ip(self) -> dict[str, Host]:
        return {h.ip: h for h in self.hosts.values()}

    def intf_name(self, node: str, port: int) -> str:
        """Mininet's interface naming: <node>-eth<port> (hosts: eth0)."""
        return f"{node}-eth{port}"

    @cached_property
    def switch_ports(self) -> dict[tuple[str, int], FabricLink]:
        """(switch, port) -> the link behind it."""
        out = {}
        for link in self.links:
            for node in (link.a, link.b):
                if node in self.switches:
                    out[(node, link.port_of(node))] = link
        return out

    def egress_interfaces(self) -> list[tuple[str, str, FabricLink]]:
        """(node, interface, link) for every sending end: where tc shapes egress."""
        out = []
        for link in self.links:
            for node in (link.a, link.b):
                port = link.port_of(node)
                intf = self.intf_name(node, port)
                out.append((node, intf, link))
        return out
