"""A replica of smaller frames (emulation.frame_bytes): every host route caps the segment
it is sent, the leaf queues hold the same bytes in more packets, and a TCP stream across
the fabric sends segments of the payload asked for."""

from __future__ import annotations

import json
import subprocess

import pytest

from testbed.datapath import tc
from testbed.emulation.net import ADVMSS_HEADERS
from testbed.model.tcp import wire_mss
from tests.emulation.conftest import running_fabric, wait_for

pytestmark = pytest.mark.root

FRAME = 414


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    yield from running_fabric(tmp_path_factory, {"emulation.frame_bytes": FRAME})


def test_routes_cap_the_segment_and_queues_keep_their_bytes_in_more_packets(small):
    for host in ("i0", "i7"):
        routes = small.host(host).cmd("ip route show")
        assert f"advmss {FRAME - ADVMSS_HEADERS}" in routes, routes
    node, port, link = next((n, i, lk) for n, i, lk in small.fabric.egress_interfaces()
                            if n in small.fabric.switches)
    where = small.interface_netns.get(port)
    shown = subprocess.run([*(["nsenter", f"--net={where}"] if where else []),
                            "tc", "qdisc", "show", "dev", port], capture_output=True,
                           text=True, check=True).stdout
    q = small.scenario.emulation.queue_min_packets
    packets = tc.queue_packets(link.rate_bps, q, FRAME)
    assert packets > tc.queue_packets(link.rate_bps, q)  # more of them than full frames
    assert f"limit {packets}p" in shown, shown


def test_a_stream_across_the_fabric_sends_segments_of_the_smaller_payload(small):
    server, client = small.host("i4"), small.host("i0")  # tier 3: every layer's routes
    server.cmd("iperf3 -s -D -1 -p 5301")
    wait_for(lambda: ":5301 " in server.cmd("ss -ltnH"), 10, "iperf3 to listen")
    out = client.cmd(f"iperf3 -c {server.IP()} -p 5301 -t 1 -J")
    start = json.loads(out)["start"]
    assert start["tcp_mss_default"] == wire_mss(FRAME), start
