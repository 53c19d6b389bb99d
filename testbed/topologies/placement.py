"""Which Open vSwitch daemon forwards which switch, when the fabric is split over several.

The userspace datapath forwards every veth port in ovs-vswitchd's main thread: one core
carries the whole fabric. With emulation.ovs_instances = N the switches are shared out
over N daemons, each in its own network namespace (the userspace datapath's "ovs-netdev"
tap exists once per namespace), so N main threads forward. Pure: the emulation places
switches with it, and the controller's poller and the fidelity monitor find each switch
port's namespace with it.
"""

from __future__ import annotations

NETNS_PREFIX = "netkv-ovs"
LAYERS = {"tor": 0, "agg": 1, "core": 2}


def switch_daemons(switches, n: int) -> dict[str, int]:
    """Switch -> daemon index: round-robin over the switches layer by layer (tor, agg,
    core), so each layer is spread evenly and every daemon gets switches.

    Every packet is forwarded once per switch on its path, so a daemon that holds a
    share of every layer holds about that share of all forwarding, whatever the traffic
    pattern; grouping by pod would leave the core layer's load on one daemon.
    """
    if n < 1:
        raise ValueError(f"ovs_instances must be >= 1, got {n}")
    names = sorted(switches, key=_layer_order)
    if n > len(names):
        raise ValueError(f"ovs_instances {n} exceeds the fabric's {len(names)} switches")
    return {name: k % n for k, name in enumerate(names)}


def _layer_order(name: str) -> tuple[int, str, int]:
    layer = name.rstrip("0123456789")
    return LAYERS.get(layer, len(LAYERS)), layer, int(name[len(layer):] or 0)


def netns_name(daemon: int) -> str:
    return f"{NETNS_PREFIX}{daemon}"


def netns_path(daemon: int) -> str:
    return f"/run/netns/{netns_name(daemon)}"


def interface_netns(fabric, n: int) -> dict[str, str]:
    """Switch egress interface -> the namespace path it lives in ({} for one daemon: all
    switch ports are then in the root namespace)."""
    if n <= 1:
        return {}
    daemon = switch_daemons(fabric.switches, n)
    return {intf: netns_path(daemon[node]) for node, intf, _ in fabric.egress_interfaces()
            if node in daemon}
