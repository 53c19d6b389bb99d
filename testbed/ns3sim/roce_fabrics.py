"""Small fabrics for RoCE's behaviours on the ns-3 program, with no scenario around them:
two senders on one bottleneck, an incast, a chain that PFC pauses hop by hop, a ring whose
routes are not up-down, the scenarios' fat-tree with links down. Tests assert on what
they return and benchmarks/bench_ns3.py prints it; the settings are the engine's own
(`roce_settings`), at one replica scale.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field

from testbed.ns3sim.ns3_fabric import roce_settings
from testbed.ns3sim.process import Ns3Process
from testbed.ns3sim.program import checked_program
from testbed.scenario.ns3 import RoceCfg
from testbed.topologies import routing
from testbed.topologies.fabric import Fabric
from testbed.topologies.fattree import FatTreeSpec

LINE_BPS = 40e9  # the DCQCN paper's links
SCALE = 1e-2  # the replica's rung RoCE's verdicts are read at (docs/ns3.md)
DELAY_NS = 1000  # one-way per link
MB = 1_000_000
MS = 1_000_000  # ns


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
    scale: float = SCALE

    def __post_init__(self) -> None:
        self.rate_bps = LINE_BPS * self.scale
        self.names = self.hosts + self.switches
        self.ids = {n: i for i, n in enumerate(self.names)}
        self.proc = Ns3Process(checked_program())
        self.proc.hello()
        cfg = RoceCfg(**self.over)
        settings = {"transport": "roce", "queue_limit": "packets", "twin": "none",
                    "wire": 1.0} | roce_settings(cfg, self.scale)
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


def star(senders: int, over: dict | None = None, scale: float = SCALE) -> SmallFabric:
    """`senders` hosts and a receiver on one switch: the receiver's link the bottleneck."""
    hosts = [f"h{i}" for i in range(senders)] + ["r"]
    return SmallFabric(hosts, ["s"], [(h, "s") for h in hosts], over or {}, scale=scale)


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


def fat_tree(down: set[frozenset] = frozenset(), over: dict | None = None
             ) -> tuple[SmallFabric, dict[tuple[str, str], set[tuple[str, str]]]]:
    """The scenarios' 2-pod fat-tree (16 hosts, 20 switches, every link equal) with the
    `down` links ({a, b}) failed, routed as the controller routes it (shortest live
    paths), one next hop per destination at each switch (a stable hash picks among equal
    ones, as per-destination L3 routing does); with its dependency graph."""
    fab = Fabric(FatTreeSpec(), 1.0)
    ports = fab.switch_ports
    table = {}
    for sw, routes in routing.next_hops(fab, set(down)).items():
        table[sw] = {dst: (outs[zlib.crc32(f"{sw}>{dst}".encode()) % len(outs)],)
                     for dst, outs in routes.items()}
    links = [(lk.a, lk.b) for lk in fab.links if routing.link_key(lk) not in down]
    nxt = {(sw, dst): ports[(sw, outs[0])].peer_of(sw)
           for sw, routes in table.items() for dst, outs in routes.items()}
    small = SmallFabric(list(fab.hosts), list(fab.switches), links, over or {}, nxt)
    return small, routing.dependencies(fab, table)


def _path(f: SmallFabric, src: str, dst: str) -> list[tuple[str, str]]:
    hop, node = [], src
    while node != dst:
        step = f._next(node, dst) if node in f.hosts else f.routes[(node, dst)]
        hop.append((node, step))
        node = step
    return hop


def cycle_flows(f: SmallFabric, cycle: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """For each dependency around the cycle (one hop, then the next), a host pair whose
    path takes both: the traffic that fills it."""
    pairs = []
    for here, then in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        for src in f.hosts:
            pick = next((dst for dst in f.hosts if dst != src and _adjacent(
                _path(f, src, dst), here, then)), None)
            if pick:
                pairs.append((src, pick))
                break
    return pairs


def _adjacent(path: list[tuple[str, str]], a: tuple[str, str], b: tuple[str, str]) -> bool:
    return any(x == a and y == b for x, y in zip(path, path[1:], strict=False))


# Four ToR uplinks down (tor0 keeps one, tor1 loses one): the fewest failures that leave
# the fat-tree's shortest routes a cycle of dependencies (none of the 5,456 sets of up to
# three switch links does; 84 of the 35,960 sets of four do: docs/ns3.md)
CYCLE_DOWN = frozenset(frozenset(p) for p in (("tor0", "agg0"), ("tor0", "agg1"),
                                                ("tor0", "agg2"), ("tor1", "agg3")))


def fat_tree_deadlock(down: set[frozenset] = CYCLE_DOWN, watchdog_ms: float = 20) -> dict:
    """The fat-tree with `down` failed: its dependency cycle, and, with flows filling it
    (as the ring's: marking off, small pause thresholds), whether they stood still
    before the watchdog, what it named, and whether they then ended. With nothing down
    the same host pairs run on up-down routes."""
    over = {"kmin_kb": 1e6, "kmax_kb": 2e6, "pfc_xoff_kb": 32, "watchdog_ms": watchdog_ms,
            "restore_ms": watchdog_ms}
    probe, graph = fat_tree(CYCLE_DOWN, over)
    pairs = cycle_flows(probe, routing.dependency_cycle(graph))
    probe.close()
    f, graph = fat_tree(down, over)
    try:
        for s, d in pairs:
            f.flow(0, s, d, 20 * MB)
        stuck, ended_before = f.pfc(int(watchdog_ms * MS / SCALE * 0.95)), len(f.done)
        st = f.pfc(int(watchdog_ms * MS / SCALE * 10))
        done = dict(f.done)
    finally:
        f.close()
    return {"cycle": routing.dependency_cycle(graph), "flows": pairs,
            "stuck": [h for h, lk in stuck.links.items() if lk.paused_now],
            "ended_before": ended_before, "trips": st.trips, "ended": len(done),
            "kv_drops": sum(lk.kv_drops for lk in st.links.values())}


def fairness(window_ms: int = 250, until_ms: int = 6000) -> dict:
    """Two senders on one bottleneck, the second 50 ms after the first: when their shares
    came within 15% of each other (modelled ms after the second began), the link's use."""
    f = star(2)
    try:
        f.flow(0, "h0", "r", 200 * MB)
        f.run(50 * MS)
        f.flow(50 * MS, "h1", "r", 200 * MB)
        prev, fair_at, shares = f.received(50 * MS), None, []
        for t in range(300 * MS, until_ms * MS + 1, window_ms * MS):
            got = f.received(t)
            rates = [(got.get(k, 0) - prev.get(k, 0)) * 8 / (window_ms / 1e3) for k in (1, 2)]
            prev = got
            shares.append(sum(rates) / (LINE_BPS * SCALE))
            if fair_at is None and min(rates) > 0.85 * max(rates):
                fair_at = (t - 50 * MS) / MS
        st = f.pfc(until_ms * MS)
    finally:
        f.close()
    return {"fair_after_ms": fair_at, "use_last_2s": sum(shares[-8:]) / 8, "cnps": st.cnps,
            "marks": st.links[("s", "r")].marks, "timeouts": st.timeouts}


def incast(senders: int = 8) -> dict:
    """`senders` 20 MB writes to one receiver at once: the bottleneck's KV queue at its
    deepest (the first burst at line rate, before a CNP is back) and from 1 s on."""
    f = star(senders)
    try:
        for i in range(senders):
            f.flow(0, f"h{i}", "r", 20 * MB)
        late = [f.pfc(t).links[("s", "r")].kv_now for t in range(1000 * MS, 3000 * MS, 50 * MS)]
        st = f.pfc(6000 * MS)
        done = dict(f.done)
    finally:
        f.close()
    return {"ended": len(done), "peak_bytes": st.links[("s", "r")].max_kv,
            "late_max_bytes": max(late), "kmax_bytes": RoceCfg().kmax_kb * 1e3,
            "pauses": sum(lk.pauses for lk in st.links.values()),
            "kv_drops": sum(lk.kv_drops for lk in st.links.values()), "naks": st.naks,
            "timeouts": st.timeouts}


def propagation(xoff_kb: float = 64) -> dict:
    """PFC alone (ECN out of reach) under a sustained incast at s1's port to r: which
    egresses it paused by 200 ms, each ingress's deepest against Xoff + headroom, and
    whether everything was released and ended by 3 s."""
    f = chain(4, {"kmin_kb": 1e6, "kmax_kb": 2e6, "pfc_xoff_kb": xoff_kb})
    try:
        for h in ("h0", "h1", "h2", "h3", "x"):
            f.flow(0, h, "r", 10 * MB)
        mid = f.pfc(200 * MS)
        end = f.pfc(3000 * MS)
        done = dict(f.done)
    finally:
        f.close()
    return {"paused": sorted(hop for hop, lk in mid.links.items() if lk.pauses),
            "over_bound": [hop for hop, lk in mid.links.items()
                           if lk.max_ingress > xoff_kb * 1e3 + lk.headroom],
            "deepest_ingress": max(lk.max_ingress for lk in mid.links.values()),
            "headroom": max(lk.headroom for lk in mid.links.values()),
            "ended": len(done), "paused_at_end": [h for h, lk in end.links.items() if lk.paused_now],
            "kv_drops": sum(lk.kv_drops for lk in end.links.values()), "trips": end.trips}


def deadlock(watchdog_ms: float = 20) -> dict:
    """The ring's cycle of pauses: whether it stood still before the watchdog, the egresses
    the watchdog named and when (modelled ns), and whether the flows then ended."""
    f = ring({"kmin_kb": 1e6, "kmax_kb": 2e6, "pfc_xoff_kb": 32, "watchdog_ms": watchdog_ms,
              "restore_ms": watchdog_ms})
    try:
        for s, d in (("ha", "hc"), ("hb", "ha"), ("hc", "hb")):
            f.flow(0, s, d, 20 * MB)
        before = watchdog_ms * MS / SCALE * 0.95
        stuck, ended_before = f.pfc(int(before)), len(f.done)
        st = f.pfc(int(watchdog_ms * MS / SCALE * 10))
        done = dict(f.done)
    finally:
        f.close()
    return {"stuck": [h for h, lk in stuck.links.items() if lk.paused_now],
            "ended_before": ended_before, "trips": st.trips, "ended": len(done),
            "resent": st.naks + st.timeouts}


def fair_ends(starts: list[float], sizes: list[float], rate: float) -> list[float]:
    """When each flow on one bottleneck ends under max-min sharing (processor sharing:
    the flows present split `rate` equally), the flow model's answer for a star."""
    left = dict(enumerate(sizes))
    ends, now, todo = [0.0] * len(sizes), 0.0, sorted(range(len(sizes)), key=starts.__getitem__)
    live: list[int] = []
    while todo or live:
        nxt = starts[todo[0]] if todo else float("inf")
        if live:
            share = rate / len(live)
            first = min(live, key=left.__getitem__)
            t_end = now + left[first] / share
            if t_end <= nxt:
                for k in live:
                    left[k] -= share * (t_end - now)
                now = t_end
                live.remove(first)
                ends[first] = now
                continue
            for k in live:
                left[k] -= share * (nxt - now)
        now = nxt
        live.append(todo.pop(0))
    return ends


def short_transfers(scale: float, senders: int = 8, shard_mb: float = 20.0,
                    gap_ms: float = 0.5, over: dict | None = None) -> dict:
    """Short writes into one receiver, a new one every `gap_ms` real ms from the next
    sender (the real fabric's shard of `shard_mb` takes shard_mb x 8 / 40 Gbit/s alone:
    4 ms at 20 MB), on the replica at `scale` (bytes and rates x scale, DCQCN as
    roce_settings puts it): each write's completion time against max-min sharing's, the
    flow model's. Real time throughout: the same at every scale where the replica holds."""
    f = star(senders, over, scale)
    size = int(shard_mb * MB * scale)
    starts = [k * gap_ms * 1e-3 for k in range(senders)]
    try:
        fids = [f.flow(int(t * 1e9), f"h{k}", "r", size) for k, t in enumerate(starts)]
        st = f.pfc(int((starts[-1] + 100 * senders * shard_mb * 8e6 / LINE_BPS) * 1e9))
        done = dict(f.done)
    finally:
        f.close()
    wire = size * (1 + 46 / 1000)  # RoCE's headers on every 1000-byte payload
    fair = fair_ends(starts, [wire] * senders, f.rate_bps / 8)
    ratios = [(done[fid] * 1e-9 - t) / (e - t) for fid, t, e in zip(fids, starts, fair,
                                                                    strict=True) if fid in done]
    return {"scale": scale, "ended": len(done), "fct_vs_fair_mean": sum(ratios) / len(ratios),
            "fct_vs_fair_max": max(ratios), "cnps": st.cnps}
