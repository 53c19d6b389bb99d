"""What the controller installs, as data (pure): classification (DSCP policy) and
forwarding rules per switch, and ECMP select groups. The os-ken shell (app.py) turns these
into OpenFlow 1.3 messages; tests read them directly (Faucet keeps its valve logic apart
from its controller shell the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.topologies import routing
from testbed.topologies.traffic_classes import CLASSES, CONTROL, KV, trusted_level_dscps

TABLE_CLASSIFY, TABLE_FORWARD = 0, 1
PAIR_COOKIE = 0x5041495200000000  # per-pair ECMP rules, removed as a set on reroute
ARP = 0x0806
IPV4 = 0x0800


@dataclass(frozen=True)
class Rule:
    """One flow entry. `actions`: ("output", port) | ("group", gid) | ("set_dscp", dscp) |
    ("controller",); `goto`: the next table, if any."""

    table: int
    priority: int
    match: tuple[tuple[str, int | str], ...]
    actions: tuple[tuple, ...] = ()
    goto: int | None = None
    cookie: int = 0


def _m(**fields) -> tuple[tuple[str, int | str], ...]:
    return tuple(fields.items())


def classify_rules(host_ports: list[int], kv_ports: tuple[int, ...],
                   control_ports: tuple[int, ...]) -> list[Rule]:
    """A ToR's DSCP policy at host ingress: trust the KV priority levels senders set per
    layer chunk (MFS and its baselines) above all else, mark KV and control by port, trust
    the class table's code points, re-mark anything else best effort. ARP goes to the
    controller. Inside the fabric: trust."""
    rules = [Rule(TABLE_FORWARD, 300, _m(eth_type=ARP), (("controller",),))]
    for port in host_ports:
        for dscp in trusted_level_dscps():
            rules.append(Rule(TABLE_CLASSIFY, 250, _m(in_port=port, eth_type=IPV4,
                                                      ip_dscp=dscp), goto=TABLE_FORWARD))
        for field in ("tcp_dst", "tcp_src"):
            for cls, ports in ((KV, kv_ports), (CONTROL, control_ports)):
                for p in ports:
                    rules.append(Rule(TABLE_CLASSIFY, 200,
                                      _m(in_port=port, eth_type=IPV4, ip_proto=6, **{field: p}),
                                      (("set_dscp", cls.dscp),), TABLE_FORWARD))
        for cls in CLASSES:
            rules.append(Rule(TABLE_CLASSIFY, 100, _m(in_port=port, eth_type=IPV4,
                                                      ip_dscp=cls.dscp), goto=TABLE_FORWARD))
        rules.append(Rule(TABLE_CLASSIFY, 50, _m(in_port=port, eth_type=IPV4),
                          (("set_dscp", 0),), TABLE_FORWARD))
    rules.append(Rule(TABLE_CLASSIFY, 0, (), goto=TABLE_FORWARD))
    return rules


def route_table(fabric, down_ends) -> tuple[dict, dict, set[str]]:
    """Next hops on the live links, stable group ids, and the down links' names."""
    down = {routing.link_key(fabric.switch_ports[end]) for end in down_ends
            if end in fabric.switch_ports}
    table = routing.next_hops(fabric, down)
    return table, routing.group_ids(table), {f"{min(k)}-{max(k)}" for k in down}


def forward_rules(fabric, switch: str, table: dict, gids: dict, ecmp: str) -> list[Rule]:
    """A switch's forwarding: one rule per destination (a port, or a select group over
    its equal-cost ports); under per-pair ECMP one more rule per (source, destination)
    pair pinning the hashed port (topologies/routing.py)."""
    rules = []
    for dst, ports in table[switch].items():
        ip = fabric.hosts[dst].ip
        action = ("output", ports[0]) if len(ports) == 1 else ("group", gids[(switch, ports)])
        rules.append(Rule(TABLE_FORWARD, 100, _m(eth_type=IPV4, ipv4_dst=ip), (action,)))
        if ecmp == "per-pair" and len(ports) > 1:
            for src in fabric.hosts.values():
                if src.name == dst:
                    continue
                port = routing.pair_port(src.ip, ip, ports)
                rules.append(Rule(TABLE_FORWARD, 110, _m(eth_type=IPV4, ipv4_src=src.ip,
                                                         ipv4_dst=ip),
                                  (("output", port),), cookie=PAIR_COOKIE))
    return rules


def switch_groups(switch: str, gids: dict) -> dict[int, tuple[int, ...]]:
    """gid -> ports of the switch's select groups."""
    return {gid: ports for (sw, ports), gid in gids.items() if sw == switch}
