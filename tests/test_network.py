"""The fluid network checks the paper made (VI-B): path bandwidth, 1/N shares, reallocation."""

import random

import pytest

from testbed.flowsim.network import FluidNetwork
from testbed.topologies.fattree import FatTreeSpec

GBPS = 1e9 / 8


def drain(net: FluidNetwork) -> dict[int, float]:
    """Run the network alone until every flow ends; return flow id -> end time."""
    ends = {}
    now = net.last_update
    while net.flows:
        now = net.next_completion()
        for flow in net.pop_finished(now):
            ends[flow.flow_id] = now
    return ends


@pytest.mark.parametrize("dst, gbps", [("i6", 100.0), ("i0", 50.0), ("i15", 25.0)])
def test_one_flow_gets_its_path_bandwidth_within_0_1_percent(dst, gbps):
    net = FluidNetwork(FatTreeSpec(), random.Random(1))
    size = 10e9
    flow = net.add_flow(net.ecmp_path("i4", dst), size, 0.0)
    assert flow.rate == pytest.approx(gbps * GBPS, rel=1e-3)
    assert drain(net)[flow.flow_id] == pytest.approx(size / (gbps * GBPS), rel=1e-3)


def test_n_flows_on_one_bottleneck_get_one_nth_each():
    net = FluidNetwork(FatTreeSpec(), random.Random(1))
    path = net.spec.paths("i0", "i15")[0]
    flows = [net.add_flow(path, 1e9, 0.0) for _ in range(5)]
    for f in flows:
        assert f.rate == pytest.approx(25 * GBPS / 5, rel=1e-9)


def test_shares_are_reallocated_when_a_flow_ends():
    net = FluidNetwork(FatTreeSpec(), random.Random(1))
    path = net.spec.paths("i0", "i15")[0]
    cap = 25 * GBPS
    small = net.add_flow(path, 1e9, 0.0)
    big = net.add_flow(path, 3e9, 0.0)
    ends = drain(net)
    t_small = 1e9 / (cap / 2)
    assert ends[small.flow_id] == pytest.approx(t_small)
    # the big flow sent 1 GB at half rate, then 2 GB alone at full rate
    assert ends[big.flow_id] == pytest.approx(t_small + 2e9 / cap)


def test_max_min_gives_unbottlenecked_flows_the_leftover():
    spec = FatTreeSpec()
    net = FluidNetwork(spec, random.Random(1))
    # two flows share i0's 100G NIC; one is held to 25G on a core link, the other gets 75G
    cross = net.add_flow(spec.paths("i0", "i15")[0], 1e9, 0.0)
    local = net.add_flow(spec.paths("i0", "i2")[0], 1e9, 0.0)
    assert cross.rate == pytest.approx(25 * GBPS)
    assert local.rate == pytest.approx(75 * GBPS)


def test_background_removes_capacity_and_sets_congestion():
    spec = FatTreeSpec()
    net = FluidNetwork(spec, random.Random(1))
    net.set_background({hop: 0.4 for hop, link in net.links.items() if link.tier == 3}, 0.0)
    flow = net.add_flow(spec.paths("i0", "i15")[0], 1e9, 0.0)
    assert flow.rate == pytest.approx(25 * GBPS * 0.6)
    congestion = net.tier_congestion()
    assert congestion[3] == pytest.approx(0.4) and congestion[2] == 0.0


def test_ecmp_uses_every_equal_cost_path():
    spec = FatTreeSpec()
    net = FluidNetwork(spec, random.Random(3))
    chosen = {tuple(net.ecmp_path("i0", "i15")) for _ in range(400)}
    assert len(chosen) == spec.n_cores


def test_strict_priority_levels_then_max_min_within_a_level():
    import random

    from testbed.flowsim.network import FluidNetwork
    from testbed.scenario import load_scenario
    from tests.conftest import ROOT

    spec = load_scenario(ROOT / "scenarios" / "default.yaml").cluster.spec()
    net = FluidNetwork(spec, random.Random(1))
    path = spec.paths("i0", "i8")[0]
    cap = min(net.links[h].capacity for h in path)
    hi = net.add_flow(path, 1e9, 0.0, level=0)
    lo = net.add_flow(path, 1e9, 0.0, level=3)
    assert hi.rate == pytest.approx(cap) and lo.rate == pytest.approx(0.0)
    net.set_level(lo, 0, 0.0)  # promoted: now they share
    assert hi.rate == pytest.approx(cap / 2) and lo.rate == pytest.approx(cap / 2)


def test_a_capped_flow_takes_its_cap_and_leaves_the_rest():
    import random

    from testbed.flowsim.network import FluidNetwork
    from testbed.scenario import load_scenario
    from tests.conftest import ROOT

    spec = load_scenario(ROOT / "scenarios" / "default.yaml").cluster.spec()
    net = FluidNetwork(spec, random.Random(1))
    path = spec.paths("i0", "i8")[0]
    cap = min(net.links[h].capacity for h in path)
    slow = net.add_flow(path, 1e9, 0.0)
    slow.cap = cap / 10
    fast = net.add_flow(path, 1e9, 0.0)  # recompute on add applies the cap
    assert slow.rate == pytest.approx(cap / 10)
    assert fast.rate == pytest.approx(cap * 0.9)


def test_the_completion_heap_stays_proportional_to_the_flows():
    """Every rate change schedules a flow's last byte anew; the stale entries are dropped
    before they outnumber the live flows by much (millions at 8192 GPUs otherwise)."""
    net = FluidNetwork(FatTreeSpec(), random.Random(1))
    path = net.spec.paths("i0", "i15")[0]
    flows = [net.add_flow(path, 1e15, 0.0) for _ in range(8)]
    for k in range(3000):  # one flow comes and goes: the others' rates change each time
        extra = net.add_flow(path, 1e15, k * 1e-3)
        net.remove_flows(k * 1e-3 + 5e-4, lambda f, e=extra: f is e)
    assert len(net._ends) <= 4 * len(net.flows) + 1024 + 1
    assert all(f.rate == pytest.approx(25 * GBPS / 8) for f in flows)
    assert net.next_completion() == pytest.approx(min(f.due for f in flows))
