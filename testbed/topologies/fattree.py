"""Fat-tree spec: pods, racks, servers, GPUs, instances, tiers and the link graph.

This is the single description of the fabric. The flow simulator routes on its link
graph and the emulation builds its Mininet topology from the same object.

Bandwidth model. The paper states per-tier bandwidths as ratios to the host NIC
(B1 = 100 Gbps, B2 = B1/2 "2:1", B3 = B1/4 "4:1"). We realise both readings at once:
every hop of a tier-k path is a link of capacity B_k, so a lone flow crossing tier k
gets exactly B_k (the per-path figure the oracle publishes), and the *number* of links
realises the ratio in aggregate: a rack's uplinks total (instances per rack * B1) /
tor_oversubscription and a pod's core links total (instances per pod * B1) /
core_oversubscription. With the paper's cluster that is 4 aggregation switches per pod
(rack uplink 4 x 50 = 200 G for 400 G of NICs, 2:1) and 2 core links per aggregation
switch (pod uplink 8 x 25 = 200 G for 800 G, 4:1). Both counts can be set by hand (the
emulation may want a smaller fabric); the ratios then no longer hold in aggregate.

Links: instance <-> server bus (NVLink, tier 0), instance NIC <-> ToR (B1, tier 1),
ToR <-> every aggregation switch of its pod (B2, tier 2), aggregation <-> core (B3,
tier 3). Aggregation switch j of every pod connects to core group j, as in a k-ary
fat-tree, so cross-pod traffic has aggs * cores_per_agg equal-cost paths. A KV transfer
is TP parallel flows from one NIC: when ECMP spreads them the transfer can beat B_k, a
gap between the cost model and the fabric that the testbed exists to measure.

Placement. 'segregated' (the paper's default) fills whole racks with prefill
instances, spread evenly over pods, so no prefill shares a server or rack with a
decode (tiers 0 and 1 unreached). 'colocated' spreads prefill instances one per
stride so tiers 0 and 1 appear. An explicit list of prefill instance names overrides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from testbed.topologies.tiers import TierMap

TIERS = (0, 1, 2, 3)
TIER_NAMES = {0: "same server", 1: "same rack", 2: "same pod", 3: "cross pod"}


@dataclass(frozen=True)
class Instance:
    name: str
    role: str  # "prefill" or "decode"
    pod: int
    rack: int  # global rack index
    server: int  # global server index
    gpus: tuple[int, ...]  # global GPU indices


@dataclass(frozen=True)
class Link:
    """A full-duplex link; capacity applies to each direction."""

    a: str
    b: str
    capacity_gbps: float
    tier: int


@dataclass(frozen=True)
class FatTreeSpec:
    pods: int = 2
    racks_per_pod: int = 2
    servers_per_rack: int = 2
    gpus_per_server: int = 8
    tp: int = 4
    host_gbps: float = 100.0
    nvlink_gbps: float = 3600.0  # 450 GB/s
    tor_oversubscription: float = 2.0  # B1 / B2
    core_oversubscription: float = 4.0  # B1 / B3
    latency_us: tuple[float, float, float, float] = (1.0, 3.0, 8.0, 15.0)
    aggs_per_pod: int | None = None  # default: realise tor_oversubscription
    cores_per_agg: int | None = None  # default: realise core_oversubscription
    placement: str = "segregated"
    prefill_instances: int | None = None  # default: a quarter of all instances
    prefill: tuple[str, ...] = field(default=())  # explicit names override placement

    def __post_init__(self) -> None:
        for name in ("pods", "racks_per_pod", "servers_per_rack", "gpus_per_server", "tp",
                     "aggs_per_pod", "cores_per_agg"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.gpus_per_server % self.tp:
            raise ValueError(
                f"tp ({self.tp}) must divide gpus_per_server ({self.gpus_per_server})"
            )
        for name in ("host_gbps", "nvlink_gbps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("tor_oversubscription", "core_oversubscription"):
            if getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be >= 1 (1 means no oversubscription)")
        if len(self.latency_us) != 4:
            raise ValueError("latency_us needs one value per tier 0..3")
        if self.placement not in ("segregated", "colocated"):
            raise ValueError(f"placement must be 'segregated' or 'colocated', got {self.placement!r}")
        n = self.n_instances
        n_prefill = len(self.prefill) if self.prefill else self.n_prefill
        if not 1 <= n_prefill < n:
            raise ValueError(
                f"prefill_instances must leave at least one decode instance: "
                f"{n_prefill} of {n} instances"
            )
        names = {f"i{k}" for k in range(n)}
        unknown = [p for p in self.prefill if p not in names]
        if unknown:
            raise ValueError(f"prefill names unknown instances: {unknown}")

    # -- sizes ---------------------------------------------------------------------
    @property
    def n_gpus(self) -> int:
        return self.pods * self.racks_per_pod * self.servers_per_rack * self.gpus_per_server

    @property
    def instances_per_server(self) -> int:
        return self.gpus_per_server // self.tp

    @property
    def instances_per_rack(self) -> int:
        return self.instances_per_server * self.servers_per_rack

    @property
    def n_instances(self) -> int:
        return self.n_gpus // self.tp

    @property
    def n_racks(self) -> int:
        return self.pods * self.racks_per_pod

    @property
    def n_aggs(self) -> int:
        """Aggregation switches per pod (one uplink of B2 from every ToR to each)."""
        if self.aggs_per_pod is not None:
            return self.aggs_per_pod
        b2 = self.host_gbps / self.tor_oversubscription
        return max(1, math.ceil(self.instances_per_rack * self.host_gbps
                                / self.tor_oversubscription / b2 - 1e-9))

    @property
    def n_cores_per_agg(self) -> int:
        if self.cores_per_agg is not None:
            return self.cores_per_agg
        b3 = self.host_gbps / self.core_oversubscription
        pod_up = self.instances_per_rack * self.racks_per_pod * self.host_gbps
        return max(1, math.ceil(pod_up / self.core_oversubscription / b3 / self.n_aggs - 1e-9))

    @property
    def n_cores(self) -> int:
        return self.n_aggs * self.n_cores_per_agg

    @property
    def n_prefill(self) -> int:
        if self.prefill:
            return len(self.prefill)
        if self.prefill_instances is not None:
            return self.prefill_instances
        return max(1, self.n_instances // 4)

    # -- tiers ---------------------------------------------------------------------
    @property
    def tier_bandwidth_gbps(self) -> dict[int, float]:
        return {
            0: self.nvlink_gbps,
            1: self.host_gbps,
            2: self.host_gbps / self.tor_oversubscription,
            3: self.host_gbps / self.core_oversubscription,
        }

    @property
    def tier_latency_us(self) -> dict[int, float]:
        return dict(zip(TIERS, self.latency_us, strict=True))

    # -- instances -------------------------------------------------------------------
    def _prefill_names(self) -> set[str]:
        if self.prefill:
            return set(self.prefill)
        n, total = self.n_prefill, self.n_instances
        if self.placement == "colocated":
            stride = total / n
            return {f"i{math.floor(k * stride)}" for k in range(n)}
        per_rack = self.instances_per_rack
        racks_needed = math.ceil(n / per_rack)
        racks = [math.floor(k * self.n_racks / racks_needed) for k in range(racks_needed)]
        names: list[str] = []
        for rack in racks:
            names.extend(f"i{rack * per_rack + j}" for j in range(per_rack))
        return set(names[:n])

    @cached_property
    def instances(self) -> tuple[Instance, ...]:
        prefill = self._prefill_names()
        out = []
        per_server = self.instances_per_server
        for k in range(self.n_instances):
            server = k // per_server
            rack = server // self.servers_per_rack
            pod = rack // self.racks_per_pod
            first_gpu = server * self.gpus_per_server + (k % per_server) * self.tp
            name = f"i{k}"
            out.append(Instance(
                name=name,
                role="prefill" if name in prefill else "decode",
                pod=pod, rack=rack, server=server,
                gpus=tuple(range(first_gpu, first_gpu + self.tp)),
            ))
        return tuple(out)

    @cached_property
    def by_name(self) -> dict[str, Instance]:
        return {i.name: i for i in self.instances}

    @property
    def prefill_pool(self) -> list[Instance]:
        return [i for i in self.instances if i.role == "prefill"]

    @property
    def decode_pool(self) -> list[Instance]:
        return [i for i in self.instances if i.role == "decode"]

    def tier(self, a: str, b: str) -> int:
        """tau(p, d): 0 same server, 1 same rack, 2 same pod, 3 cross pod."""
        x, y = self.by_name[a], self.by_name[b]
        if x.server == y.server:
            return 0
        if x.rack == y.rack:
            return 1
        if x.pod == y.pod:
            return 2
        return 3

    @cached_property
    def tier_map(self) -> TierMap:
        """Tier of every (prefill, decode) pair, as the oracle publishes it."""
        return TierMap(self, [p.name for p in self.prefill_pool],
                       [d.name for d in self.decode_pool])

    @cached_property
    def all_tiers(self) -> TierMap:
        """Tier of every pair of instances (any may send to any other: role switching)."""
        names = [i.name for i in self.instances]
        return TierMap(self, names, names)

    # -- switches and links ----------------------------------------------------------
    def server_node(self, server: int) -> str:
        return f"srv{server}"

    def tor(self, rack: int) -> str:
        return f"tor{rack}"

    def agg(self, pod: int, j: int) -> str:
        return f"agg{pod * self.n_aggs + j}"

    def core(self, c: int) -> str:
        return f"core{c}"

    def cores_of_agg(self, j: int) -> range:
        m = self.n_cores_per_agg
        return range(j * m, (j + 1) * m)

    @cached_property
    def pod_of(self) -> dict[str, int]:
        """The pod of every instance, ToR and aggregation switch (core switches have none)."""
        out = {i.name: i.pod for i in self.instances}
        out.update({self.tor(r): r // self.racks_per_pod for r in range(self.n_racks)})
        out.update({self.agg(p, j): p for p in range(self.pods) for j in range(self.n_aggs)})
        return out

    @cached_property
    def switches(self) -> dict[str, list[str]]:
        """Switch names by layer (servers' NVLink buses are not switches)."""
        return {
            "tor": [self.tor(r) for r in range(self.n_racks)],
            "agg": [self.agg(p, j) for p in range(self.pods) for j in range(self.n_aggs)],
            "core": [self.core(c) for c in range(self.n_cores)] if self.pods > 1 else [],
        }

    @property
    def n_switches(self) -> int:
        """Every layer's switches: at most this many OVS daemons can split them."""
        return sum(len(v) for v in self.switches.values())

    @cached_property
    def links(self) -> tuple[Link, ...]:
        bw = self.tier_bandwidth_gbps
        out: list[Link] = []
        for inst in self.instances:
            if self.instances_per_server > 1:
                out.append(Link(inst.name, self.server_node(inst.server), bw[0], 0))
            out.append(Link(inst.name, self.tor(inst.rack), bw[1], 1))
        for rack in range(self.n_racks):
            pod = rack // self.racks_per_pod
            for j in range(self.n_aggs):
                out.append(Link(self.tor(rack), self.agg(pod, j), bw[2], 2))
        if self.pods > 1:
            for pod in range(self.pods):
                for j in range(self.n_aggs):
                    for c in self.cores_of_agg(j):
                        out.append(Link(self.agg(pod, j), self.core(c), bw[3], 3))
        return tuple(out)

    def paths(self, src: str, dst: str) -> list[list[tuple[str, str]]]:
        """All equal-cost shortest paths from src to dst instance, as directed hops."""
        return [self.path_at(src, dst, i) for i in range(self.path_count(src, dst))]

    def path_count(self, src: str, dst: str) -> int:
        """How many equal-cost paths join src and dst (one below tier 2)."""
        tier = self.tier(src, dst)
        return 1 if tier < 2 else self.n_aggs if tier == 2 else self.n_aggs * self.n_cores_per_agg

    def path_at(self, src: str, dst: str, i: int) -> list[tuple[str, str]]:
        """The i-th of `paths(src, dst)`, built alone: an ECMP choice needs one path, and
        a tier-3 pair of a large fabric has hundreds."""
        x, y = self.by_name[src], self.by_name[dst]
        tier = self.tier(src, dst)
        if tier == 0:
            bus = self.server_node(x.server)
            return [(src, bus), (bus, dst)]
        ts, td = self.tor(x.rack), self.tor(y.rack)
        if tier == 1:
            return [(src, ts), (ts, dst)]
        if tier == 2:
            agg = self.agg(x.pod, i)
            return [(src, ts), (ts, agg), (agg, td), (td, dst)]
        j = i // self.n_cores_per_agg
        a_s, a_d, core = self.agg(x.pod, j), self.agg(y.pod, j), self.core(i)
        return [(src, ts), (ts, a_s), (a_s, core), (core, a_d), (a_d, td), (td, dst)]

    def describe(self) -> str:
        bw = self.tier_bandwidth_gbps
        return (
            f"{self.pods} pods x {self.racks_per_pod} racks x {self.servers_per_rack} servers x "
            f"{self.gpus_per_server} GPUs = {self.n_gpus} GPUs; TP={self.tp}: "
            f"{self.n_instances} instances ({len(self.prefill_pool)} prefill, "
            f"{len(self.decode_pool)} decode); {self.n_aggs} agg/pod, {self.n_cores} cores; "
            f"tiers Gbps "
            + ", ".join(f"{t}:{bw[t]:g}" for t in TIERS)
        )
