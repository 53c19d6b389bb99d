"""Small fabrics for RoCE's behaviours on the ns-3 program, with no scenario around them:
two senders on one bottleneck, an incast, a chain that PFC pauses hop by hop, a ring whose
routes are not up-down. Tests assert on what they return and benchmarks/bench_ns3.py
prints it; the settings are the engine's own (`roce_settings`), at one replica scale.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from testbed.ns3sim.ns3_fabric import roce_settings
from testbed.ns3sim.process import Ns3Process
from testbed.ns3sim.program import checked_program
from testbed.scenario.ns3 import RoceCfg

LINE_BPS = 40e9  # the DCQCN paper's links
SCALE = 1e-2  # the replica's rung RoCE's verdicts are read at (docs/ns3.md)
DELAY_NS = 1000  # one-way per link
MB = 1_000_000


@dataclass
class PfcLink:
    """One egress (a directed link) as `pfc` reports it."""

    pauses: int
    paused_ns: int
    max_kv: int
    marks: int
    kv_drops: int
    max_ingress: int
    headroom: int
    paused_now: bool
    kv_now: int


@dataclass
class PfcState:
    links: dict[tuple[str, str], PfcLink]
    trips: list[tuple[str, str, int]]  # (from, to, modelled ns) a watchdog broke a pause
    cnps: int
    naks: int
    timeouts: int
    live: int


@dataclass
class SmallFabric:
    """Hosts and switches joined by equal links; one route per destination (the shortest,
    or those given). The program runs RoCE with `over` on top of the defaults."""

    hosts: list[str]
    switches: list[str]
    links: list[tuple[str, str]]
    over: dict = field(default_factory=dict)
    routes: dict[tuple[str, str], str] | None = None  # (switch, dst host) -> next node
    rate_bps: float = LINE_BPS * SCALE

    def __post_init__(self) -> None:
        self.names = self.hosts + self.switches
        self.ids = {n: i for i, n in enumerate(self.names)}
        self.proc = Ns3Process(checked_program())
        self.proc.hello()
        cfg = RoceCfg(**self.over)
        settings = {"transport": "roce", "queue_limit": "packets", "twin": "none",
                    "wire": 1.0} | roce_settings(cfg, SCALE)
        for k, v in settings.items():
            self.proc.send(f"set {k} {v}")
        for i in range(len(self.hosts)):
            self.proc.send(f"host 10.0.0.{i + 1}")
        for i, _ in enumerate(self.switches):
            self.proc.send(f"switch {i + 1}")
        for a, b in self.links:
            self.proc.send(f"link {self.ids[a]} {self.ids[b]} {self.rate_bps:.0f} {DELAY_NS} 1000")
        for sw in self.switches:
            for dst in self.hosts:
                nxt = (self.routes or {}).get((sw, dst)) or self._next(sw, dst)
                self.proc.send(f"route {self.ids[sw]} {self.ids[dst]} {self._link(sw, nxt)}")
        self.proc.ask("ready")
        self.fid = 0
        self.done: dict[int, int] = {}

    def _link(self, a: str, b: str) -> int:
        return next(i for i, lk in enumerate(self.links) if set(lk) == {a, b})

    def _next(self, sw: str, dst: str) -> str:
        """The first hop of a shortest path (breadth first, links in their order)."""
        seen, todo = {sw: None}, deque([sw])
        while todo:
            node = todo.popleft()
            for a, b in self.links:
                for x, y in ((a, b), (b, a)):
                    if x == node and y not in seen and (y in self.switches or y == dst):
                        seen[y] = node
                        todo.append(y)
        node = dst
        while seen[node] != sw:
            node = seen[node]
        return node

    def flow(self, t_ns: int, src: str, dst: str, size: int) -> int:
        self.fid += 1
        self.proc.send(f"flow {t_ns} {self.fid} {self.ids[src]} {self.ids[dst]} {size} 0 136")
        return self.fid

    def run(self, t_ns: int) -> int:
        """Run to t_ns (completions on the way are kept); the simulator's time."""
        while True:
            lines = self.proc.ask(f"run {t_ns}")
            now = int(lines[-1].split()[1])
            for line in lines[:-1]:
                words = line.split()
                self.done[int(words[1])] = int(words[2])
            if now >= t_ns:
                return now

    def received(self, t_ns: int) -> dict[int, int]:
        self.run(t_ns)
        return {int(w[1]): int(w[2]) for w in (line.split() for line in
                                               self.proc.ask(f"counters {t_ns}"))
                if w[0] == "f"}

    def rate(self, fid: int) -> float:
        return float(self.proc.ask(f"rate {fid}")[0].split()[2])

    def pfc(self, t_ns: int) -> PfcState:
        self.run(t_ns)
        links, trips, total = {}, [], None
        for line in self.proc.ask(f"pfc {t_ns}"):
            w = line.split()
            if w[0] == "l":
                a, b = self.links[int(w[1])]
                hop = (a, b) if w[2] == "0" else (b, a)
                nums = [int(x) for x in w[3:]]
                links[hop] = PfcLink(*nums[:7], bool(nums[7]), nums[8])
            elif w[0] == "w":
                a, b = self.links[int(w[1])]
                trips.append(((a, b) if w[2] == "0" else (b, a)) + (int(w[3]),))
            elif w[0] == "g":
                total = [int(x) for x in w[1:]]
        return PfcState(links, trips, *total)

    def close(self) -> None:
        self.proc.close()


def star(senders: int, over: dict | None = None) -> SmallFabric:
    """`senders` hosts and a receiver on one switch: the receiver's link the bottleneck."""
    hosts = [f"h{i}" for i in range(senders)] + ["r"]
    return SmallFabric(hosts, ["s"], [(h, "s") for h in hosts], over or {})


def chain(senders: int, over: dict | None = None) -> SmallFabric:
    """senders -> s0 -> s1 -> r, and x on s1 sending to r too: s1's port to r is the
    bottleneck, PFC backs it up into s0 and from there into the senders' NICs."""
    hosts = [f"h{i}" for i in range(senders)] + ["x", "r"]
    links = [(f"h{i}", "s0") for i in range(senders)] + [("s0", "s1"), ("x", "s1"),
                                                          ("s1", "r")]
    return SmallFabric(hosts, ["s0", "s1"], links, over or {})


def ring(over: dict | None = None) -> SmallFabric:
    """Three switches in a ring, a host on each, every flow routed two hops clockwise: a
    cycle of buffer dependencies (routes that are not up-down), PFC's deadlock."""
    hosts, sws = ["ha", "hb", "hc"], ["A", "B", "C"]
    links = [("ha", "A"), ("hb", "B"), ("hc", "C"), ("A", "B"), ("B", "C"), ("C", "A")]
    clockwise = {"A": "B", "B": "C", "C": "A"}
    home = {"ha": "A", "hb": "B", "hc": "C"}
    routes = {(sw, h): (h if home[h] == sw else clockwise[sw]) for sw in sws for h in hosts}
    return SmallFabric(hosts, sws, links, over or {}, routes)
