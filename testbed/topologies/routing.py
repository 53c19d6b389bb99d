"""Forwarding decisions for the fat-tree, computed from the spec: pure, and the one
place that says what each `network.ecmp` mode means.

For every destination host, a breadth-first search over the *live* links gives each
switch's distance; a switch's next hops are its neighbours one step closer. Several next
hops are ECMP: a select group (per-flow hashing in OVS) or, in per-pair mode, one port per
(source, destination) pair chosen by a stable hash. A link going down only changes the
live set. The controller installs these decisions; the flow model and the router follow
the same per-pair paths (PairPaths).
"""

from __future__ import annotations

import zlib
from collections import defaultdict, deque

from testbed.topologies.fabric import Fabric, FabricLink

LinkKey = frozenset  # frozenset({a, b})

# network.ecmp: what each mode means in the flow model, and what the packet fabric does
ECMP_MODES = {
    "per-transfer": "a transfer's flows share one path, drawn at random per transfer (the "
                    "paper's per-pair tier bandwidth); switches cannot see transfers, so on "
                    "packets the controller runs it as per-pair",
    "per-pair": "the path is a stable hash of the (source, destination) addresses, as L3 "
                "switches do: every transfer of a pair takes the same path",
    "per-flow": "each flow (a shard's TCP connection) hashes alone, as OVS select groups "
                "hash the 5-tuple",
}


def packet_ecmp(mode: str) -> str:
    """The ECMP mode the emulated fabric realises for a scenario's `network.ecmp`."""
    if mode not in ECMP_MODES:
        raise ValueError(f"unknown network.ecmp {mode!r}; choose from {', '.join(ECMP_MODES)}")
    return "per-pair" if mode == "per-transfer" else mode


def link_key(link: FabricLink) -> LinkKey:
    return frozenset((link.a, link.b))


def next_hops(fabric: Fabric, down: set[LinkKey]) -> dict[str, dict[str, tuple[int, ...]]]:
    """switch -> destination host -> sorted output ports on shortest live paths."""
    adj: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for link in fabric.links:
        if link_key(link) in down:
            continue
        adj[link.a].append((link.b, link.port_a))
        adj[link.b].append((link.a, link.port_b))
    table: dict[str, dict[str, tuple[int, ...]]] = {s: {} for s in fabric.switches}
    for dst in fabric.hosts:
        dist = {dst: 0}
        queue = deque([dst])
        while queue:
            node = queue.popleft()
            if node != dst and node in fabric.hosts:
                continue  # hosts do not forward
            for peer, _ in adj[node]:
                if peer not in dist:
                    dist[peer] = dist[node] + 1
                    queue.append(peer)
        for switch in fabric.switches:
            if switch not in dist:
                continue  # partitioned: no route
            ports = sorted(port for peer, port in adj[switch] if dist.get(peer) == dist[switch] - 1)
            if ports:
                table[switch][dst] = tuple(ports)
    return table


def pair_port(src_ip: str, dst_ip: str, ports: tuple[int, ...]) -> int:
    """Per-transfer ECMP: a stable hash of the address pair picks one port."""
    return ports[zlib.crc32(f"{src_ip}>{dst_ip}".encode()) % len(ports)]


def group_ids(table: dict[str, dict[str, tuple[int, ...]]]) -> dict[tuple[str, tuple[int, ...]], int]:
    """A stable group id per (switch, multi-port set)."""
    out: dict[tuple[str, tuple[int, ...]], int] = {}
    for switch, routes in sorted(table.items()):
        for ports in sorted(set(routes.values())):
            if len(ports) > 1:
                out[(switch, ports)] = 1 + sum(1 for k in out if k[0] == switch)
    return out


def pair_path(fabric: Fabric, table: dict[str, dict[str, tuple[int, ...]]], src: str,
              dst: str) -> list[tuple[str, str]]:
    """The hops a (src, dst) host pair's packets take under per-pair (L3 hash) ECMP:
    the controller installs exactly these choices, and both engines can follow them."""
    hosts = fabric.hosts
    ports_of = fabric.switch_ports
    src_ip, dst_ip = hosts[src].ip, hosts[dst].ip
    node, hops = hosts[src].tor, [(src, hosts[src].tor)]
    while node != dst:
        ports = table[node][dst]
        port = pair_port(src_ip, dst_ip, ports) if len(ports) > 1 else ports[0]
        nxt = ports_of[(node, port)].peer_of(node)
        hops.append((node, nxt))
        node = nxt
    return hops


def path_text(hops: list[tuple[str, str]]) -> str:
    """A path as transfers.csv records it: a>b>c."""
    return ">".join([hops[0][0]] + [h[1] for h in hops])


def path_hops(text: str) -> list[tuple[str, str]]:
    """The directed hops of a recorded path (a>b>c); none for an empty one."""
    nodes = text.split(">")
    return list(zip(nodes[:-1], nodes[1:], strict=True))


class PairPaths:
    """Per-pair paths on the whole fabric (no failures), cached: the hops the controller
    pins for each host pair."""

    def __init__(self, spec):
        self.spec = spec
        self._fabric = None
        self._table: dict = {}
        self._cache: dict[tuple[str, str], list[tuple[str, str]]] = {}

    def path(self, src: str, dst: str) -> list[tuple[str, str]]:
        key = (src, dst)
        hops = self._cache.get(key)
        if hops is None:
            if self.spec.tier(src, dst) == 0:  # same server: no switch to hash
                hops = self.spec.paths(src, dst)[0]
            else:
                if self._fabric is None:
                    self._fabric = Fabric(self.spec, 1.0)
                    self._table = next_hops(self._fabric, set())
                hops = pair_path(self._fabric, self._table, src, dst)
            self._cache[key] = hops
        return hops

    def text(self, src: str, dst: str) -> str:
        """The path as transfers.csv records it: a>b>c."""
        return path_text(self.path(src, dst))


LAYER_LEVEL = {"tor": 1, "agg": 2, "core": 3}  # hosts are 0


def switch_levels(fabric: Fabric) -> dict[str, int]:
    """Switch -> its layer's height (ToR 1, aggregation 2, core 3)."""
    return {name: LAYER_LEVEL[layer] for layer, names in fabric.spec.switches.items()
            for name in names}


def valleys(fabric: Fabric, table: dict[str, dict[str, tuple[int, ...]]]) -> list[tuple[str, ...]]:
    """(switch, next, after, dst) wherever a route to dst steps down from switch to next
    and then up again to after: routes that are not up-down, on which lossless (PFC)
    traffic can hold a cycle of pauses. Empty on the fat-tree's routes."""
    level = switch_levels(fabric)
    ports = fabric.switch_ports
    out = []
    for switch, routes in table.items():
        for dst, outs in routes.items():
            for port in outs:
                nxt = ports[(switch, port)].peer_of(switch)
                if nxt not in level or level[nxt] >= level[switch]:
                    continue
                for port2 in table.get(nxt, {}).get(dst, ()):
                    after = ports[(nxt, port2)].peer_of(nxt)
                    if level.get(after, 0) > level[nxt]:
                        out.append((switch, nxt, after, dst))
    return out


def dependencies(fabric: Fabric, table: dict[str, dict[str, tuple[int, ...]]]
                 ) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """The channel dependency graph of lossless traffic on these routes: each directed
    hop (a, b) any host's traffic can cross -> the egresses (b, c) a packet that crossed
    it may wait on at b (every ECMP port counts). A pause can only wait on itself around
    a cycle of it (Dally and Seitz's condition for deadlock), so no cycle, no deadlock."""
    ports = fabric.switch_ports
    out: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for dst in fabric.hosts:
        todo = [(h, fabric.hosts[h].tor) for h in fabric.hosts if h != dst]
        seen = set(todo)
        while todo:
            a, b = todo.pop()
            if b in fabric.hosts:
                continue  # a host takes what reaches it: it never pauses
            for port in table.get(b, {}).get(dst, ()):
                hop = (b, ports[(b, port)].peer_of(b))
                out[(a, b)].add(hop)
                if hop not in seen:
                    seen.add(hop)
                    todo.append(hop)
    return dict(out)


def dependency_cycle(graph: dict[tuple[str, str], set[tuple[str, str]]]
                     ) -> list[tuple[str, str]]:
    """The hops of one cycle of a dependency graph, in order; empty where it has none."""
    state: dict[tuple[str, str], int] = {}  # 1 on the path being walked, 2 done
    for root in sorted(graph):
        if root in state:
            continue
        path, branches = [root], [iter(sorted(graph.get(root, ())))]
        state[root] = 1
        while path:
            nxt = next(branches[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                branches.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                branches.append(iter(sorted(graph.get(nxt, ()))))
    return []
