"""KV priority levels on packets (issue 7): HTB level classes approximate strict
priority, and a sender's packets carry the DSCP of its current level through the
controller's trust rules."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from scapy.all import IP, TCP, rdpcap

from testbed.emulation.net import EmulatedNetwork
from testbed.scenario import load_scenario
from testbed.topologies.traffic_classes import KV, LEVEL_SHARE, level_dscp, level_tos
from tests.conftest import ROOT, TRACE
from tests.emulation.conftest import wait_for, write_small

pytestmark = [pytest.mark.root, pytest.mark.slow]
LEVELS = 8


@pytest.fixture(scope="module")
def levelled(tmp_path_factory):
    """One core path between the pods, so every cross-pod flow shares it; MFS levels."""
    tmp = tmp_path_factory.mktemp("levels")
    path = write_small(tmp, TRACE, {"cluster.aggs_per_pod": 1, "cluster.cores_per_agg": 1,
                                    "network.flow_policy": "mfs", "network.ecmp": "per-pair"})
    network = EmulatedNetwork(load_scenario(path), path, tmp / "run")
    network.start()
    try:
        yield network
    finally:
        network.stop()


def _shares(net, high: tuple[str, str], low: tuple[str, str], seconds: float = 4.0):
    """Two iperf3 streams across the one core link at once, marked with levels 0 and
    K-1; returns each one's received rate."""
    flows = [(*high, 5601, level_tos(0, LEVELS)), (*low, 5602, level_tos(LEVELS - 1, LEVELS))]
    for _, dst, port, _ in flows:
        net.host(dst).cmd(f"iperf3 -s -D -1 -p {port}")
    time.sleep(0.3)
    procs = [net.host(src).popen(f"iperf3 -c {net.host(dst).IP()} -p {port} -t {seconds} "
                                 f"-O 1 --tos {tos} -J".split())
             for src, dst, port, tos in flows]
    rates = []
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 30)
        rates.append(json.loads(out)["end"]["sum_received"]["bits_per_second"])
    return rates


def test_the_high_level_takes_the_link_from_the_low_level_whichever_host_sends_it(levelled):
    expected = 1 - LEVEL_SHARE * KV.share  # configured 99.4%; strict priority: 100%
    hi, lo = _shares(levelled, ("i0", "i4"), ("i1", "i5"))
    assert hi / (hi + lo) > expected - 0.08, (hi, lo)
    hi, lo = _shares(levelled, ("i1", "i5"), ("i0", "i4"))  # swapped: it is the DSCP
    assert hi / (hi + lo) > expected - 0.08, (hi, lo)


SENDER = """
import sys
from testbed.workers.kvstream import Marking, send_shard
size, switch_at, rate = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
marking = Marking(lambda sent, total: (7 if sent < switch_at else 0, rate), 8, 40)
r = send_shard(sys.argv[1], int(sys.argv[2]), "prio", 0, 1, size, marking=marking)
print(r.level_bytes)
"""


def test_packets_carry_the_dscp_of_their_current_level_on_the_core(levelled, tmp_path):
    net = levelled
    kv_port = net.scenario.emulation.kv_port  # the port the controller would mark AF41
    spec = net.fabric.spec
    core = next(lk for lk in net.fabric.links
                if lk.a == spec.agg(0, 0) and lk.b.startswith("core"))
    intf = net.fabric.intf_name(core.a, core.port_a)
    pcap = tmp_path / "core.pcap"
    cap = subprocess.Popen(["tcpdump", "-i", intf, "-U", "-w", str(pcap), "tcp"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recv = net.host("i4").popen([sys.executable, "-m", "testbed.workers.probe", "recv",
                                 net.host("i4").IP(), str(kv_port)], cwd=ROOT)
    size, switch_at = 400_000, 200_000
    try:
        wait_for(lambda: recv.stdout.readline().strip() == b"ready", 20, "the receiver")
        # paced at 2 Mbit/s, under the 5 Mbit/s core: no loss, so no retransmission
        send = net.host("i0").popen([sys.executable, "-c", SENDER, net.host("i4").IP(),
                                     str(kv_port), str(size), str(switch_at), "250000"],
                                    cwd=ROOT)
        out, _ = send.communicate(timeout=60)
        assert send.returncode == 0
    finally:
        recv.terminate()
        recv.wait(timeout=10)
        time.sleep(0.5)
        cap.terminate()
        cap.wait(timeout=10)
    assert eval(out.decode()) == {7: switch_at, 0: size - switch_at}  # noqa: S307 - a dict
    data = [p for p in rdpcap(str(pcap)) if IP in p and TCP in p
            and p[TCP].dport == kv_port and len(p[TCP].payload) > 0]
    assert data
    isn = min(p[TCP].seq for p in data)
    first_seen: dict[int, int] = {}
    for p in data:
        first_seen.setdefault(p[TCP].seq - isn, p[IP].tos >> 2)
    low, high = level_dscp(LEVELS - 1, LEVELS), level_dscp(0, LEVELS)
    assert set(first_seen.values()) == {low, high}  # never re-marked to AF41 or BE
    # the boundary in the byte stream: within the unsent backlog a socket may hold
    slack = 8192 + size // 40 + 1500
    header = min(first_seen)  # the KV header's segment
    assert max(s for s, d in first_seen.items() if d == low) < header + switch_at + slack
    assert min(s for s, d in first_seen.items() if d == high) > header + switch_at - slack
