"""Switches shared out over private OVS daemons: every switch on one daemon, every layer
spread evenly, every switch port's namespace known (the poller, the fidelity monitor and
link faults find ports through it), and scenarios that cannot be split refused."""

from collections import Counter

import pytest

from testbed.scenario import ScenarioError, load_scenario
from testbed.topologies.placement import (
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

    assert private_daemons(EmulationCfg()) == 0  # the system's Open vSwitch
    assert private_daemons(EmulationCfg(private_ovs=True)) == 1
    assert private_daemons(EmulationCfg(ovs_instances=3)) == 3

