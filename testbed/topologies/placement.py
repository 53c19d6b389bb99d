"""Which Open vSwitch daemon forwards which switch, when the fabric is split over several.

The userspace datapath forwards every veth port in ovs-vswitchd's main thread: one core
carries the whole fabric. With emulation.ovs_instances = N the switches are shared out
over N daemons, each in its own network namespace (the userspace datapath's "ovs-netdev"
tap exists once per namespace), so N main threads forward. Pure: the emulation places
switches with it, and the controller's poller and the fidelity monitor find each switch
port's namespace with it.
"""

from __future__ import annotations

import os
import re

# A fabric run side by side with others (testbed.emulation.lanes) names its daemons'
# namespaces apart: `ip netns` names are machine-wide.
NETNS_PREFIX = os.environ.get("NETKV_NETNS_PREFIX", "netkv-ovs")
LANE_NETNS_RE = re.compile(r"^netkv-lane(\d+)$")
LANE_OVS_NETNS_RE = re.compile(r"^netkv-l(\d+)-ovs(\d+)$")
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


def lane_netns(lane: int) -> str:
    """The namespace a side-by-side fabric's switches, controller and router live in."""
    return f"netkv-lane{lane}"


def lane_daemon_prefix(lane: int) -> str:
    """NETNS_PREFIX inside side-by-side fabric `lane` (matches LANE_OVS_NETNS_RE)."""
    return f"netkv-l{lane}-ovs"


def netns_name(daemon: int) -> str:
    return f"{NETNS_PREFIX}{daemon}"


def netns_path(daemon: int) -> str:
    return f"/run/netns/{netns_name(daemon)}"


# A daemon per this many cores: on a 16-core server `bench_fabric` (8 long flows, scale
# 2e-4 to 1e-3) was faithful on 4 daemons and flagged on 1 and 2 (docs/fabric-scale.md); the
# other cores carry the workers, router and controller.
CORES_PER_DAEMON = 4


def auto_daemons(cores: int, switches: int, datapath: str,
                 one_machine: bool = True) -> tuple[int, str]:
    """(daemons, why) for emulation.ovs_instances: auto, given the cores the fabric may
    use and the datapath the run chose."""
    if datapath == "kernel":
        return 1, "the kernel datapath forwards on every core already"
    if not one_machine:
        return 1, "a fabric over several servers uses each server's own Open vSwitch"
    if cores <= CORES_PER_DAEMON:
        return 1, (f"{cores} core{'s' if cores > 1 else ''}: a split needs more than "
                   f"{CORES_PER_DAEMON}")
    n = min(cores // CORES_PER_DAEMON, switches)
    return n, f"{cores} cores, a daemon per {CORES_PER_DAEMON}" + (
        f", at most the fabric's {switches} switches" if n == switches else "")


def private_daemons(emu) -> int:
    """How many private OVS daemons a run of this emulation section starts: 0 when the
    system's Open vSwitch carries the fabric (one instance, not asked to be private).
    An "auto" count is the machine's to choose (EmulatedNetwork resolves it)."""
    if emu.ovs_instances == "auto":
        raise ValueError("emulation.ovs_instances is 'auto': resolve it for the machine "
                         "that runs the fabric first")
    return emu.ovs_instances if emu.ovs_instances > 1 or emu.private_ovs else 0


def interface_netns(fabric, n: int) -> dict[str, str]:
    """Switch egress interface -> the namespace path it lives in, for a fabric on `n`
    private daemons ({} for none: all switch ports are then in the root namespace)."""
    if n < 1:
        return {}
    daemon = switch_daemons(fabric.switches, n)
    return {intf: netns_path(daemon[node]) for node, intf, _ in fabric.egress_interfaces()
            if node in daemon}
