"""Incremental max-min sharing (FluidNetwork.recompute over the touched component) gives
the rates the full recomputation gives (tests/reference_maxmin.py), on random fat-trees and
random sequences of flows arriving, leaving and changing level, with weights, caps and
strict priority levels; each against two references that fill by different routes
(sequential progressive filling, and local bottlenecks frozen round by round on arrays);
the Python sharing and the compiled one (native/maxmin.cc) alike."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.flowsim.compiled_sharing import NativeFluidNetwork
from testbed.flowsim.network import FluidNetwork
from testbed.topologies.fattree import FatTreeSpec
from tests.reference_maxmin import array_reference_rates, reference_rates

# the Python sharing (the reference) and the compiled one
NETWORKS = pytest.mark.parametrize("network", [FluidNetwork, NativeFluidNetwork],
                                   ids=["python", "compiled"])
SPECS = [FatTreeSpec(), FatTreeSpec(pods=4), FatTreeSpec(gpus_per_server=4, aggs_per_pod=2,
                                                         cores_per_agg=1)]


@pytest.mark.parametrize("reference", [reference_rates, array_reference_rates])
def test_both_references_solve_a_shared_bottleneck_with_a_cap_and_a_lower_level(reference):
    """Three flows on one path: one capped at a tenth of the path's bottleneck, one taking
    the rest, one on a lower priority level left with nothing."""
    spec = SPECS[0]
    net = FluidNetwork(spec, random.Random(0))
    servers = [i.name for i in spec.instances]
    path = spec.paths(servers[0], servers[-1])[0]
    a, b, c = (net.add_flow(path, 1e12, 0.0, level=lv) for lv in (0, 0, 1))
    bottleneck = min(net.links[h].kv_capacity for h in path)
    a.cap = bottleneck / 10
    rates = reference(net.flows, net.links)
    assert rates[a.flow_id] == pytest.approx(bottleneck / 10)
    assert rates[b.flow_id] == pytest.approx(bottleneck * 0.9)
    assert rates[c.flow_id] == pytest.approx(0.0, abs=1e-3)


def _pairs(spec: FatTreeSpec) -> list[tuple[str, str]]:
    names = [i.name for i in spec.instances]
    return list(itertools.permutations(names, 2))


def check(net: FluidNetwork) -> None:
    """Rates agree with both references to 1e-9: relative, or absolute against the largest
    link capacity (a rate that is zero in one and a few ulps of a capacity in the other is
    rounding)."""
    for reference in (reference_rates, array_reference_rates):
        _check_against(net, reference(net.flows, net.links))


def _check_against(net: FluidNetwork, want: dict[int, float]) -> None:
    assert set(want) == set(net.flows)
    tol = 1e-9 * max(link.capacity for link in net.links.values())
    for fid, flow in net.flows.items():
        assert flow.rate == pytest.approx(want[fid], rel=1e-9, abs=tol), fid
    rates = net.kv_rates()
    for hop, link in net.links.items():
        total = sum(want[f] for f in link.flows)
        assert rates[link.index] == pytest.approx(total, rel=1e-9, abs=tol), hop


@st.composite
def scripts(draw):
    spec_index = draw(st.integers(0, len(SPECS) - 1))
    ops = draw(st.lists(st.tuples(st.sampled_from(["add", "add", "add", "burst", "remove",
                                                   "level", "cap", "background"]),
                                  st.integers(0, 10**6)), min_size=1, max_size=40))
    return spec_index, ops


# how the network re-shares: (incremental, priority levels drawn, largest incremental
# re-fill before giving up: 2 makes it give up half-way often)
FILLS = {"component": (False, 3, 64), "incremental": (True, 1, 64),
         "incremental-levels": (True, 3, 64), "incremental-gives-up": (True, 1, 2)}


@NETWORKS
@pytest.mark.parametrize("fill", FILLS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts())
def test_incremental_sharing_equals_the_full_recomputation(network, fill, script):
    spec_index, ops = script
    spec = SPECS[spec_index]
    net = network(spec, random.Random(0))
    net.incremental, levels, net.INCREMENTAL_MAX_FLOWS = FILLS[fill]
    net.INCREMENTAL_MAX_SHARE = 0.0
    pairs = _pairs(spec)
    now = 0.0
    for op, x in ops:
        rng = random.Random(x)
        now += 1e-3
        if op == "add" or not net.flows:
            a, b = pairs[x % len(pairs)]
            paths = spec.paths(a, b)
            flow = net.add_flow(paths[x % len(paths)], 1e12, now, level=rng.randrange(levels))
            flow.weight = rng.choice([1.0, 0.5, 2.0, rng.uniform(0.1, 3.0)])
            if rng.random() < 0.3:
                flow.cap = rng.uniform(1e6, 1e10)
            net.recompute(flow.path)  # its weight and cap are set after it arrived
        elif op == "burst":  # many flows at once: bottlenecks that depend on each other
            touched, arrived = set(), []
            for _ in range(rng.randrange(4, 24)):
                a, b = pairs[rng.randrange(len(pairs))]
                paths = spec.paths(a, b)
                path = paths[rng.randrange(len(paths))]
                arrived.append(net.add_flow(path, 1e12, now, level=rng.randrange(min(levels, 2)),
                                            share=False))
                arrived[-1].weight = rng.choice([1.0, 1.0, 0.5, rng.uniform(0.1, 3.0)])
                touched.update(path)
            net.recompute(touched, changed=arrived)  # as the simulator starts a transfer
        elif op == "remove":
            victim = sorted(net.flows)[x % len(net.flows)]
            net.remove_flows(now, lambda f, v=victim: f.flow_id == v)
        elif op == "level":
            flow = net.flows[sorted(net.flows)[x % len(net.flows)]]
            net.set_level(flow, (flow.level + 1) % levels, now)
        elif op == "cap":
            flow = net.flows[sorted(net.flows)[x % len(net.flows)]]
            flow.cap = None if flow.cap else rng.uniform(1e6, 1e10)
            net.recompute(flow.path)
        else:
            hops = list(net.links)
            net.set_background({hops[x % len(hops)]: rng.uniform(0.0, 0.9)}, now)
        check(net)


@NETWORKS
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts())
def test_a_transfers_streams_reweighted_as_one_leaves_keep_sharing_exact(network, script):
    """Under the TCP model a transfer's streams share unequally by their order among the
    ones still sending (tcp.shard_share): a stream leaving moves its siblings' weights on
    other paths, and the incremental re-sharing still gives the full recomputation's
    rates."""
    from testbed.model.tcp import TcpParams

    spec_index, ops = script
    spec = SPECS[spec_index]
    params = TcpParams(mss_bytes=1.0, init_cwnd=1e12, handshake_rtts=0, tail_rtts=0,
                       shard_spread=0.6)
    net = network(spec, random.Random(0), tcp=params)
    pairs = _pairs(spec)
    now = 0.0
    for op, x in ops:
        rng = random.Random(x)
        now += 1e-3
        if op in ("remove", "level") and net.flows:
            victim = sorted(net.flows)[x % len(net.flows)]
            net.remove_flows(now, lambda f, v=victim: f.flow_id == v)
        else:  # a transfer of 1-4 streams over the pair's paths, one re-sharing for all
            a, b = pairs[x % len(pairs)]
            paths = spec.paths(a, b)
            n = rng.randrange(1, 5)
            streams = [net.add_flow(paths[rng.randrange(len(paths))], 1e12, now,
                                    shard=(k, n), share=False, group=(now, x)) for k in range(n)]
            net.recompute({h for f in streams for h in f.path}, changed=streams)
            net.pop_finished(now)  # the (instant) handshakes end
        check(net)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts())
def test_the_compiled_links_carry_the_bytes_the_python_ones_do(script):
    """Every link's KV and background bytes, integrated by the compiled side as rates and
    backgrounds change, are the Python network's (to rounding), flows finishing included."""
    spec_index, ops = script
    spec = SPECS[spec_index]
    nets = [network(spec, random.Random(0)) for network in (FluidNetwork, NativeFluidNetwork)]
    pairs, hops = _pairs(spec), list(nets[0].links)
    now = 0.0
    for op, x in ops:
        now += 1e-3
        for net in nets:
            if op in ("remove", "level", "cap") and net.flows:
                net.pop_finished(now)
            elif op == "background":
                net.set_background({hops[x % len(hops)]: (x % 90) / 100}, now)
            else:
                a, b = pairs[x % len(pairs)]
                net.add_flow(spec.paths(a, b)[0], 1e5 * (1 + x % 7), now)
            net.advance(now)
    (kv_py, bg_py), (kv_c, bg_c) = (net.link_bytes() for net in nets)
    tol = 1e-9 * max(kv_py.max(), bg_py.max(), 1.0)
    assert kv_c == pytest.approx(kv_py, rel=1e-9, abs=tol)
    assert bg_c == pytest.approx(bg_py, rel=1e-9, abs=tol)
