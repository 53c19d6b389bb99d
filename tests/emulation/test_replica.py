"""One replica in modelled time: what the emulation's kernel applies (its qdiscs and host
routes, read back) is what ns-3's twin builds (its devices, queues and sockets, read back
from the program), at time dilation 1 and 2; and the two dilations build the same rates,
queues and RTO floor in modelled time, differing only in the kernel's wall-time constants.
"""

from __future__ import annotations

import subprocess

import pytest

from testbed.emulation.readback import applied_replica
from testbed.ns3sim.packet_network import PacketNetwork
from testbed.ns3sim.program import Ns3Unavailable, program_path
from testbed.ns3sim.replayer import emulation_twin
from testbed.scenario import load_scenario
from testbed.topologies.replica import wall_timers_ms
from tests.emulation.conftest import running_fabric

WALL = {f"{k}_ms" for k in wall_timers_ms(1)}


def same(a: dict, b: dict) -> bool:
    """Equal records, rates within HTB's whole bytes per second."""
    if {k: v for k, v in a.items() if k != "egress"} != \
            {k: v for k, v in b.items() if k != "egress"} or a["egress"].keys() != b["egress"].keys():
        return False
    for kind, pairs in a["egress"].items():
        for (ra, na), (rb, nb) in zip(pairs, b["egress"][kind], strict=True):
            if na != nb or abs(ra - rb) > 1e-4 * rb:
                return False
    return len(a["egress"]) > 0


LISTEN = ("import socket, time; s = socket.create_server(('', 7999)); print('ready', flush=True);"
          " c = s.accept(); time.sleep(10)")
CONNECT = ("import socket, sys; s = socket.create_connection((sys.argv[1], 7999), timeout=10);"
           " print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)"
           ".split(bytes(1))[0].decode())")


def unset_socket_congestion(net) -> str:
    """The congestion control a host's socket that sets none gets (the Transfer Engine's
    do not): the scenario's, from the hosts' routes, whatever the machine's default."""
    a, b = list(net.fabric.hosts)[:2]
    listener = net.net.get(b).popen(["python3", "-c", LISTEN], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "ready"
        return net.net.get(a).cmd(f'python3 -c "{CONNECT}" {net.fabric.hosts[b].ip}').strip()
    finally:
        listener.kill()
        listener.wait()


def test_the_emulation_builds_the_replica_ns3_builds_at_dilation_1_and_2(tmp_path_factory):
    try:
        exe = program_path()
    except Ns3Unavailable as exc:
        pytest.skip(f"ns-3 engine unavailable: {exc}")
    applied = {}
    for dilation in (1, 2):
        for net in running_fabric(tmp_path_factory, {"emulation.time_dilation": dilation}):
            applied[dilation] = applied_replica(net)
            scenario = load_scenario(net.scenario_file)
            if dilation == 1:
                assert unset_socket_congestion(net) == scenario.emulation.tcp_congestion
        ns3 = PacketNetwork(emulation_twin(scenario), 1, exe, clock=lambda: 0.0)
        try:
            built = ns3.applied_replica()
        finally:
            ns3.close()
        assert same(applied[dilation], built), (dilation, applied[dilation], built)
    one, two = ({k: v for k, v in applied[d].items() if k not in WALL} for d in (1, 2))
    assert same(one, two), (one, two)  # the same replica in modelled time
    # what the kernel cannot stretch: its wall 40 ms of delayed ACK are 20 modelled at 2
    assert applied[2]["delayed_ack_ms"] == applied[1]["delayed_ack_ms"] / 2 == 20.0
    # and the values are the replica's: 200 modelled ms of RTO floor, a switch port on the
    # tier-3 link 50 ms of its rate deep (the floor of 16 frames where that is less)
    assert one["rto_min_ms"] == 200.0
    tier3 = one["egress"]["switch:3"]
    assert all(n == max(16, -(-r * 0.05 // (1500 * 8))) for r, n in tier3), tier3
