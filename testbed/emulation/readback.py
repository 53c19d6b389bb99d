"""What a running fabric's kernel applies, read back: the replica ns-3's twin must build.

The emulation configures every rate, queue and timer from topologies/replica.py; this
reads what the kernel actually holds (each egress's HTB link rate and leaf fifos, each
host route's rto_min) and puts it in modelled time in the one shape both packet engines
record (replica.replica_record; ns-3's: PacketNetwork.applied_replica). Every emulated
run keeps it in its fidelity.json, and a replay on ns-3 refuses a run whose replica is
not the twin's (validate/engines/ns3_replay.py).
"""

from __future__ import annotations

from testbed.datapath import tc
from testbed.topologies.replica import egress_kind, replica_record, wall_timers_ms


class ReadbackError(RuntimeError):
    """The kernel holds something the replica never asked for (named)."""


def applied_replica(network) -> dict | None:
    """The replica `network` (an EmulatedNetwork that is up) applies, in modelled time;
    read once and kept on it. None on a fabric over several machines (another server's
    kernel is not read from here)."""
    if network.applied is not None or not network.hosts_here:
        return network.applied
    fabric = network.fabric
    emu = network.scenario.emulation
    netns = dict(network.interface_netns)
    for name in fabric.hosts:
        netns[fabric.intf_name(name, 0)] = f"/proc/{network.net.get(name).pid}/ns/net"
    sends = fabric.egress_interfaces()
    read = tc.read_shaping([intf for _, intf, _ in sends], netns)
    egress: dict[str, set] = {}
    for node, intf, link in sends:
        (kind, limit), = read[intf]["limits"]
        packets = limit // emu.frame_bytes if kind == "bfifo" else limit
        egress.setdefault(egress_kind(node in fabric.hosts, link.tier), set()).add(
            (emu.dilation.modelled_rate(read[intf]["rate_bps"]), packets))
    rto = {v for name in fabric.hosts
           for v in tc.read_rto_min_ms(netns[fabric.intf_name(name, 0)])}
    if len(rto) != 1:
        raise ReadbackError(f"the hosts' routes carry rto_min {sorted(rto)} ms: expected "
                            "one value on every host")
    network.applied = replica_record(egress, emu.dilation.modelled(rto.pop()),
                                     wall_timers_ms(emu.time_dilation), emu.frame_bytes,
                                     emu.queue_limit)
    return network.applied
