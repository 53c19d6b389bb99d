"""Switches shared out over private OVS daemons: every switch on one daemon, every layer
spread evenly, every switch port's namespace known (the poller, the fidelity monitor and
link faults find ports through it), and scenarios that cannot be split refused."""

from collections import Counter

import pytest

from testbed.emulation import net
from testbed.emulation.lanes import lane_cell
from testbed.scenario import ScenarioError, load_scenario
from testbed.topologies.placement import (
    auto_daemons,
    interface_netns,
    netns_path,
    private_daemons,
    switch_daemons,
)


@pytest.fixture
def fabric(write_scenario):
    return load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n")).fabric()


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 20])
def test_every_layer_is_spread_evenly_over_the_daemons(fabric, n):
    placed = switch_daemons(fabric.switches, n)
    assert set(placed) == set(fabric.switches)
    assert set(placed.values()) == set(range(n))
    for layer in ("tor", "agg", "core"):
        counts = Counter(k for s, k in placed.items() if s.startswith(layer))
        per = [counts.get(k, 0) for k in range(n)]
        assert max(per) - min(per) <= 1, (layer, per)
    totals = Counter(placed.values())
    assert max(totals.values()) - min(totals.values()) <= 1
    assert switch_daemons(reversed(list(fabric.switches)), n) == placed  # order-free


def test_every_switch_port_lives_in_its_switchs_daemon_namespace(fabric):
    assert interface_netns(fabric, 0) == {}  # no private daemon: the system's, root namespace
    one = interface_netns(fabric, 1)  # one private daemon (emulation.private_ovs)
    assert set(one.values()) == {netns_path(0)}
    placed = switch_daemons(fabric.switches, 3)
    where = interface_netns(fabric, 3)
    ports = [(node, intf) for node, intf, _ in fabric.egress_interfaces()
             if node in fabric.switches]
    assert len(where) == len(ports)
    for node, intf in ports:
        assert where[intf] == netns_path(placed[node])
    assert not any(intf.startswith("i") for intf in where)  # host NICs stay in theirs


def test_more_daemons_than_switches_is_refused(fabric):
    with pytest.raises(ValueError, match="exceeds the fabric's 20 switches"):
        switch_daemons(fabric.switches, 21)


@pytest.mark.parametrize("emulation, message", [
    ("{ovs_instances: 2, datapath: kernel}", "kernel datapath forwards on every core"),
    ("{ovs_instances: 21}", "exceeds the fabric's 20 switches"),
    ("{ovs_instances: 0}", "emulation.ovs_instances"),
    ("{private_ovs: true, datapath: kernel}", "private_ovs runs the switches on private"),
])
def test_scenarios_that_cannot_be_split_are_refused(write_scenario, emulation, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario(write_scenario(f"name: x\nworkload: {{trace: TRACE}}\n"
                                     f"emulation: {emulation}\n"))


def test_private_daemons_counts_what_a_run_starts():
    from testbed.scenario import EmulationCfg

    assert private_daemons(EmulationCfg(ovs_instances=1)) == 0  # the system's Open vSwitch
    assert private_daemons(EmulationCfg(ovs_instances=1, private_ovs=True)) == 1
    assert private_daemons(EmulationCfg(ovs_instances=3)) == 3



@pytest.mark.parametrize("cores, datapath, one_machine, daemons", [
    (2, "user", True, 1), (4, "user", True, 1), (5, "user", True, 1), (8, "user", True, 2),
    (16, "user", True, 4), (31, "user", True, 7), (200, "user", True, 20),
    (64, "kernel", True, 1), (64, "user", False, 1),
])
def test_auto_gives_a_daemon_per_four_cores_of_the_userspace_datapath(cores, datapath,
                                                                     one_machine, daemons):
    n, why = auto_daemons(cores, 20, datapath, one_machine)
    assert n == daemons and why
    if datapath == "kernel":
        assert "kernel datapath" in why
    elif not one_machine:
        assert "several servers" in why
    elif cores == 200:
        assert "20 switches" in why


def test_auto_is_the_default_and_only_a_machine_resolves_it(write_scenario):
    sc = load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"))
    assert sc.emulation.ovs_instances == "auto"
    with pytest.raises(ValueError, match="resolve it for the machine"):
        private_daemons(sc.emulation)
    on16, why = net.resolve_split(sc, "user", 16)
    assert on16.emulation.ovs_instances == 4 and "16 cores" in why
    assert on16.model_dump(exclude={"emulation"}) == sc.model_dump(exclude={"emulation"})
    assert net.resolve_split(sc, "kernel", 16)[0].emulation.ovs_instances == 1
    assert net.resolve_split(sc, "user", 16, one_machine=False)[0].emulation.ovs_instances == 1
    given = load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"
                                         "emulation: {ovs_instances: 2}\n"))
    assert net.resolve_split(given, "user", 16) == (given, None)  # the user's call stands
    with pytest.raises(ScenarioError, match="emulation.ovs_instances"):
        load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"
                                     "emulation: {ovs_instances: many}\n"))


def test_fabrics_side_by_side_split_their_share_of_the_cores(write_scenario):
    cell = lane_cell(load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n")))
    assert cell.emulation.ovs_instances == "auto"  # each lane's share is its own to split
    on8, split = net.plan_split(cell, 8)
    assert on8.emulation.ovs_instances == 2 and split["ovs_daemons"] == 2
    on2, split = net.plan_split(cell, 2)
    assert private_daemons(on2.emulation) == 1 and split["kind"] == "user"  # private, alone
    assert split["why"] == "2 cores: a split needs more than 4"


def test_a_network_resolves_auto_from_its_machine(write_scenario, tmp_path, monkeypatch):
    """What a 16-core server with only the userspace datapath gets: four daemons, the
    switch ports in their four namespaces, and the choice explained."""
    path = write_scenario("name: x\nworkload: {trace: TRACE}\n")
    monkeypatch.setattr(net, "choose_datapath", lambda _preference: "user")
    monkeypatch.setattr(net.os, "cpu_count", lambda: 16)
    network = net.EmulatedNetwork(load_scenario(path), path, tmp_path)
    assert network.private == 4 and network.scenario.emulation.ovs_instances == 4
    assert set(network.interface_netns.values()) == {netns_path(k) for k in range(4)}
    assert network.split == {"kind": "user", "ovs_daemons": 4,
                             "why": "16 cores, a daemon per 4"}
    assert net.describe_split(network.split) == \
        "datapath user on 4 OVS daemons (16 cores, a daemon per 4)"
    monkeypatch.setattr(net.os, "cpu_count", lambda: 2)
    small = net.EmulatedNetwork(load_scenario(path), path, tmp_path)
    assert small.private == 0 and small.split["ovs_daemons"] == 1  # the system's OVS
