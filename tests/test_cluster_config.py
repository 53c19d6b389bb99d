"""A cluster run's configuration, refused or accepted before anything starts (no root)."""

from __future__ import annotations

import pytest

from testbed.emulation.multi_machine import ClusterNetwork, servers_from_inventory
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


def test_tc_install_shapes_several_interfaces_in_one_run(monkeypatch, capsys):
    """Another server's switch ports are shaped by one Python start there, not one each."""
    from testbed.datapath import tc

    calls = []
    monkeypatch.setattr(tc, "install_htb", lambda intf, rate, **kw: calls.append((intf, rate, kw)))
    assert tc.main(["install", "s1-eth1", "1e6", "10", "2", "bytes",
                    "s1-eth2", "2e6", "5", "0", "packets"]) == 0
    assert calls == [("s1-eth1", 1e6, {"netns": None, "packets": 10, "kv_levels": 2,
                                       "byte_limit": True, "frame_bytes": 1514,
                                       "kv_ports": ()}),
                     ("s1-eth2", 2e6, {"netns": None, "packets": 5, "kv_levels": 0,
                                       "byte_limit": False, "frame_bytes": 1514,
                                       "kv_ports": ()})]
    calls.clear()
    assert tc.main(["install", "h1-eth0", "3e6", "8"]) == 0  # the short form
    assert calls == [("h1-eth0", 3e6, {"netns": None, "packets": 8, "kv_levels": 0,
                                       "byte_limit": False, "frame_bytes": 1514,
                                       "kv_ports": ()})]
    calls.clear()
    # a replica of smaller frames (emulation.frame_bytes): the limit names the frame
    assert tc.main(["install", "s1-eth1", "1e6", "16", "0", "packets@414"]) == 0
    assert calls[0][2]["frame_bytes"] == 414 and not calls[0][2]["byte_limit"]
    calls.clear()
    # each interface in the namespace named before it (a host's; a switch's, the root)
    assert tc.main(["install", "--netns", "/proc/7/ns/net", "h1-eth0", "1e6", "8", "0",
                    "packets", "h1-eth1", "1e6", "8", "0", "packets", "--netns",
                    "/proc/1/ns/net", "s1-eth1", "2e6", "8", "0", "bytes"]) == 0
    assert [(c[0], c[2]["netns"]) for c in calls] == [
        ("h1-eth0", "/proc/7/ns/net"), ("h1-eth1", "/proc/7/ns/net"), ("s1-eth1", "/proc/1/ns/net")]
    calls.clear()
    # a host NIC carrying a transfer library's unmarked sockets: its block of ports is KV
    assert tc.main(["install", "--netns", "/proc/7/ns/net", "--kv-ports", "7016-7031",
                    "h1-eth0", "1e6", "8", "0", "packets", "--netns", "/proc/1/ns/net",
                    "--kv-ports", "none", "s1-eth1", "2e6", "8", "0", "bytes"]) == 0
    assert [(c[0], c[2]["kv_ports"]) for c in calls] == [
        ("h1-eth0", tuple(range(7016, 7032))), ("s1-eth1", ())]
    assert tc.port_range(tuple(range(7016, 7032))) == "7016-7031" and tc.port_range(()) == "none"
    calls.clear()
    for bad in (["install", "a", "1", "2", "3", "maybe"], ["install", "a", "1", "2", "3",
                                                           "bytes", "b"], ["install"], [],
                ["install", "--netns", "/x", "a", "1", "2", "--netns", "/y", "3", "bytes"],
                ["install", "a", "1", "2", "3", "packets@64"],
                ["install", "a", "1", "2", "3", "bytes@big"],
                ["install", "--kv-ports", "7031-7016", "a", "1", "2", "3", "bytes"],
                ["install", "--kv-ports", "all", "a", "1", "2", "3", "bytes"]):
        assert tc.main(bad) == 2, bad
    assert calls == [] and "IFNAME RATE_BPS" in capsys.readouterr().err


def test_a_servers_shaping_is_cut_into_lines_a_node_shell_takes():
    from testbed.emulation.multi_machine import _lines_of

    groups = [["--netns", f"/proc/{k}/ns/net", "--kv-ports", "none", f"agg{k}-eth1",
               "20000000", "16", "2", "packets"] for k in range(200)]
    lines = _lines_of(groups)
    assert len(lines) > 1 and sum(lines, []) == sum(groups, [])  # every group once, in order
    assert all(len(line) % 9 == 0 and len(" ".join(line)) <= 2000 for line in lines)
    assert _lines_of(groups[:2]) == [groups[0] + groups[1]]


@pytest.mark.parametrize("servers", [["localhost", "vm2"], ["a", "b", "c"]])
def test_the_pod_placement_keeps_each_pod_on_one_server_and_deals_out_the_cores(servers):
    from testbed.emulation.multi_machine import _pod_placer

    fabric = load_scenario(ROOT / "scenarios" / "default.yaml").fabric()
    spec = fabric.spec
    placer = _pod_placer(spec)(servers=servers)
    where = {n: placer.place(n) for n in [*fabric.switches, *fabric.hosts]}
    crossing = [(link.a, link.b) for link in fabric.links if where[link.a] != where[link.b]]
    assert crossing and all({a[:3], b[:3]} == {"agg", "cor"} for a, b in crossing), crossing
    for pod in range(spec.pods):  # a pod, its hosts included, whole on one server
        assert len({where[n] for n, p in spec.pod_of.items() if p == pod}) == 1
    assert len({where[h] for h in fabric.hosts}) == min(spec.pods, len(servers))
    cores = spec.switches["core"]
    assert {where[c] for c in cores} == set(servers[:len(cores)])


def test_emulate_hands_its_cluster_options_to_the_api(monkeypatch, tmp_path):
    from click.testing import CliRunner

    import testbed.api
    from testbed.cli import main

    got = []

    def fake(scenario, out, **kwargs):
        got.append(kwargs)
        raise EmulationError("stopped before anything started")

    monkeypatch.setattr(testbed.api, "emulate", fake)
    inv = tmp_path / "hosts.yml"
    scenario = str(ROOT / "scenarios" / "default.yaml")
    for extra, placement, tunnel in (([], "pod", "ssh"),
                                     (["--placement", "switchbin", "--tunnel", "gre"],
                                      "switchbin", "gre")):
        result = CliRunner().invoke(main, ["emulate", scenario, "--cluster", str(inv), *extra])
        assert result.exit_code != 0 and "stopped before" in result.output, result.output
        assert {k: got[-1][k] for k in ("cluster", "placement", "tunnel")} == {
            "cluster": str(inv), "placement": placement, "tunnel": tunnel}
