"""RoCE on the ns-3 program behaving as published, on small fabrics at the replica's rung
(testbed/ns3sim/roce_fabrics.py, 1e-2 of 40 Gbit/s, DCQCN's times 100x slower), and the
engine's refusals. Times below are modelled; x SCALE gives the real fabric's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed.ns3sim import roce_fabrics
from testbed.ns3sim.check import check_scenario, roce_packets
from testbed.ns3sim.roce_fabrics import MS, SCALE
from testbed.scenario import ScenarioError, load_scenario
from tests.conftest import ROOT


def test_two_flows_on_one_bottleneck_converge_to_fair_shares():
    got = roce_fabrics.fairness()
    # within 4 modelled s (40 ms on the real 40 Gbit/s fabric), the link kept busy
    assert got["fair_after_ms"] is not None and got["fair_after_ms"] <= 4000, got
    assert got["use_last_2s"] > 0.85 and got["cnps"] > 0 and got["marks"] > 0
    assert got["timeouts"] == 0


def test_an_incast_keeps_the_queue_under_kmax_with_nothing_lost():
    got = roce_fabrics.incast(8)
    assert got["ended"] == 8 and got["late_max_bytes"] < got["kmax_bytes"], got
    assert got["kv_drops"] == got["naks"] == got["timeouts"] == 0


def test_max_min_ends_flows_on_one_bottleneck_as_processor_sharing_does():
    # 2 flows of 10 at rate 1, the second at t=5: alone until 5, then halves, 15 and 25
    assert roce_fabrics.fair_ends([0, 5], [10, 10], 1.0) == pytest.approx([15, 20])
    assert roce_fabrics.fair_ends([0, 0, 0], [1, 2, 3], 1.0) == pytest.approx([3, 5, 6])


def test_on_the_real_fabric_s_rates_dcqcn_ends_short_writes_near_max_min_s_times():
    # 8 writes of 20 MB, 0.5 ms apart, at 40 Gbit/s (scale 1: no replica): DCQCN cuts
    # and recovers within them, costing them a few percent against max-min sharing
    got = roce_fabrics.short_transfers(1.0)
    assert got["ended"] == 8 and got["cnps"] > 0, got
    assert 1.0 <= got["fct_vs_fair_mean"] < 1.15, got


def test_pfc_pauses_propagate_hop_by_hop_and_release():
    got = roce_fabrics.propagation(64)
    paused = set(got["paused"])
    assert ("s0", "s1") in paused and ("x", "s1") in paused  # s1 paused its upstreams
    assert {("h0", "s0"), ("h1", "s0")} <= paused  # and s0, backed up, paused the NICs
    assert not got["over_bound"], got  # no ingress held more than Xoff + its headroom
    assert got["ended"] == 5 and not got["paused_at_end"]
    assert got["kv_drops"] == 0 and not got["trips"]


def test_a_cycle_of_pauses_trips_the_watchdog_which_names_it_and_the_flows_end():
    # routes that are not up-down (a ring, two hops clockwise): PFC's deadlock
    got = roce_fabrics.deadlock(20)
    assert ("A", "B") in got["stuck"] and got["ended_before"] == 0, got
    tripped = {(a, b) for a, b, _ in got["trips"]}
    assert {("A", "B"), ("B", "C"), ("C", "A")} <= tripped
    assert all(t >= 20 * MS / SCALE for _, _, t in got["trips"])  # 20 real ms, slowed
    assert got["ended"] == 3 and got["resent"] > 0  # what it dropped was sent again


def test_the_fat_tree_deadlocks_only_once_its_routes_hold_a_cycle_and_the_watchdog_names_it():
    # four ToR uplinks down: the routes' dependency graph holds a cycle, and flows filling
    # it stand still until the watchdog breaks it; the same host pairs on the whole
    # fat-tree's up-down routes pause, release and end with nothing dropped
    got = roce_fabrics.fat_tree_deadlock()
    cycle = {tuple(h) for h in got["cycle"]}
    assert cycle and cycle <= set(got["stuck"]) and got["ended_before"] == 0, got
    tripped = {(a, b) for a, b, _ in got["trips"]}
    assert tripped & cycle and all(t >= 20 * MS / SCALE for *_, t in got["trips"])
    assert got["ended"] == len(got["flows"])  # what the watchdog dropped was sent again
    free = roce_fabrics.fat_tree_deadlock(frozenset())
    assert free["cycle"] == [] and free["flows"] == got["flows"]
    assert free["ended_before"] == len(free["flows"]) and not free["trips"]
    assert free["kv_drops"] == 0


def test_the_fat_tree_runs_roce_and_its_faults_detours_are_counted_and_a_cycle_named():
    # up-down routes until four ToR uplinks fail at 1 s; then the detours bounce
    # (valleys) and hold a cycle of dependencies, which ns3.json names as the routing's
    # graph finds it; the demo's traffic need not fill it: any trip is named
    from testbed.cells import Task
    from testbed.runner import run_task
    from testbed.topologies import routing
    from testbed.topologies.fabric import Fabric

    down = sorted(sorted(p) for p in roce_fabrics.CYCLE_DOWN)
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1, "workload.measure_s": 2,
                        "ns3.transport": "roce", "ns3.scale": 1e-2,
                        "faults": [{"at_s": 1.0, "kind": "link_down", "target": "-".join(p),
                                    "duration_s": 1.5} for p in down]})
    result = run_task(Task(0, {}, sc, "netkv-full", 1, engine="ns3"))
    facts = result["files"]["ns3.json"]
    roce = (facts if isinstance(facts, dict) else json.loads(facts))["roce"]
    assert roce["valley_routes"] > 0 and roce["marks"] > 0 and roce["cnps"] > 0
    fab = Fabric(sc.cluster.spec(), 1.0)
    want = routing.dependency_cycle(routing.dependencies(
        fab, routing.next_hops(fab, set(roce_fabrics.CYCLE_DOWN))))
    assert roce["dependency_cycle"] == [f"{a}>{b}" for a, b in want] != []
    assert all(t["egress"] and t["paused_s"] >= 0.2 / SCALE for t in roce["watchdog_trips"])
    assert roce["kv_drops"] == 0 or roce["watchdog_trips"]  # lossless but for the watchdog
    assert result["summary"]["ttft_mean_ms"] > 0


@pytest.mark.parametrize("field, value", [("ns3.ecn_k_packets", 4), ("ns3.rto_min_ms", 5),
                                          ("emulation.kv_connections", "per-shard")])
def test_tcp_only_fields_beside_roce_are_refused_by_name(field, value):
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"ns3.transport": "roce", field: value})
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        check_scenario(sc)


def test_roce_runs_on_ns3_alone_and_is_refused_on_the_emulation(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml", {"ns3.transport": "roce"})
    assert roce_packets(sc, "both")[0] == "ns3" and "ns-3 alone" in roce_packets(sc, "both")[1]
    with pytest.raises(ScenarioError, match="ns3.transport roce"):
        roce_packets(sc, "emulation")
    done = subprocess.run([sys.executable, "-m", "testbed", "validate",
                           str(ROOT / "scenarios" / "validate.yaml"), "--packets", "emulation",
                           "--set", "ns3.transport=roce", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "ns3.transport roce" in done.stderr
    assert not any(tmp_path.iterdir())
