"""Mininet's cluster edition drives the fabric (issue 5). This machine has one kernel and
no ip_gre, so the cross-server tunnels cannot run here (README 'Run across machines');
what runs: the cluster classes, placement, remote-style tagging and shaping, on the one
server an inventory can name here, localhost."""

from __future__ import annotations

import pytest

from testbed.emulation import cleanup
from testbed.scenario import load_scenario
from tests.conftest import TRACE
from tests.emulation.conftest import write_small
from tests.emulation.helpers import iperf

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_cluster_edition_fabric_passes_pingall_and_a_shaped_tcp_stream(tmp_path):
    from testbed.emulation.cluster import ClusterNetwork, servers_from_inventory

    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  hosts:\n    localhost: {ansible_connection: local}\n")
    servers = servers_from_inventory(inv)
    assert servers.names == ["localhost"]
    path = write_small(tmp_path, TRACE)
    sc = load_scenario(path)
    network = ClusterNetwork(sc, path, tmp_path / "run", servers)
    network.start()
    try:
        assert all(getattr(network.net.get(s), "server", None) == "localhost"
                   for s in network.fabric.switches)  # placed by Mininet's placer
        assert network.net.pingAll(timeout=2) == 0.0
        bps = iperf(network, "i0", "i7", seconds=3)  # cross-pod: through a core switch
        core = network.fabric.rate_bps(sc.cluster.spec().tier_bandwidth_gbps[3])
        assert 0.85 * core <= bps <= 1.05 * core
    finally:
        network.stop()
    assert cleanup.find_leftovers().empty
