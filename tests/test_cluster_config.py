"""A cluster run's configuration, refused or accepted before anything starts (no root)."""

from __future__ import annotations

import pytest

from testbed.emulation.cluster import ClusterNetwork, servers_from_inventory
from testbed.emulation.net import EmulationError
from testbed.scenario import load_scenario
from tests.conftest import ROOT


def _inventory(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars: {ansible_user: debian}\n  hosts:\n"
                   "    localhost: {ansible_connection: local}\n"
                   "    node2: {ansible_host: 192.0.2.11, netkv_project_dir: /srv/netkv}\n")
    return servers_from_inventory(inv)


def test_a_loopback_bind_is_refused_when_another_server_must_reach_it(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "default.yaml")
    with pytest.raises(EmulationError, match=r"emulation.bind is 127.0.0.1, which node2 cannot"):
        ClusterNetwork(sc, tmp_path / "s.yaml", tmp_path / "run", _inventory(tmp_path))


def test_the_controller_reads_every_servers_counters_and_workers_use_tcp(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "default.yaml",
                       {"emulation.bind": "192.0.2.1", "emulation.token": "t" * 32})
    servers = _inventory(tmp_path)
    net = ClusterNetwork(sc, tmp_path / "s.yaml", tmp_path / "run", servers)
    assert net._controller_args() == ["--cluster", str(servers.inventory)]
    assert [s.spec.name for s in net.read_counters.servers] == ["node2"]
    assert net.read_counters.servers[0].project_dir == "/srv/netkv"
    net.read_counters.close()
