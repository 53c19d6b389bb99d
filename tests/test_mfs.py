"""MFS priority model (testbed/model/mfs.py) on small hand-made cases (issue 7, model)."""

from __future__ import annotations

import math

import pytest

from testbed.model.mfs import (
    FlowView,
    Job,
    assign_levels,
    edf_level,
    feasible_order,
    karuna_min_rate,
    level_for_mlu,
    level_for_rli,
    mlu,
    promote,
    prune_infeasible,
    rli,
    robust_effective_deadline,
    scavenger_level,
    sjf_level,
    thresholds,
)


def test_mlu_is_the_share_of_residual_bandwidth_needed_in_time():
    assert mlu(50e6, deadline_s=2.0, now_s=1.0, bandwidth=100e6) == pytest.approx(0.5)
    assert mlu(0, 2.0, 1.0, 100e6) == 0.0
    assert mlu(1, 1.0, 1.0, 100e6) == math.inf  # the deadline is now: infeasible


def test_thresholds_are_geometric_and_levels_follow_them():
    th = thresholds(levels=4, top=0.8, ratio=0.5)
    assert th == pytest.approx([0.8, 0.4, 0.2])
    assert [level_for_mlu(u, 4) for u in (1.2, 0.8, 0.5, 0.25, 0.1)] == [0, 0, 1, 2, 3]
    with pytest.raises(ValueError):
        thresholds(levels=1)


def test_promotion_is_monotonic():
    assert promote(current=5, target=2) == 2
    assert promote(current=2, target=5) == 2  # never demoted


def test_relative_layer_index_orders_implicit_flows_below_the_reserved_top():
    assert rli(target_layer=7, executing_layer=5) == 2
    assert level_for_rli(0) == 1 and level_for_rli(2) == 3 and level_for_rli(99, 8) == 7


def test_red_resists_a_rare_tight_outlier():
    # one tight request among nine loose ones: RED stays near the loose deadline
    red = robust_effective_deadline([0.1] + [5.0] * 9)
    assert red == pytest.approx(0.1 * 0.1 + 0.9 * 5.0)
    assert robust_effective_deadline([1.0, 1.1, 4.0, 4.2]) == pytest.approx(0.5 * 1.0 + 0.5 * 4.0)
    assert robust_effective_deadline([2.0]) == 2.0


def test_feasibility_check_prunes_the_heaviest_until_the_rest_fit():
    jobs = [Job("a", 1.0, 0.5), Job("b", 1.5, 2.0), Job("c", 2.0, 0.6)]
    order, pruned = feasible_order(jobs)
    assert pruned == ["b"] and order == ["a", "c"]
    assert feasible_order([Job("x", 5.0, 1.0)]) == (["x"], [])


FLOWS = [FlowView("p2d-tight", 40e6, deadline=1.5), FlowView("p2d-loose", 10e6, deadline=9.0),
         FlowView("reuse", 30e6, deadline=None, rli=1)]


def test_each_policy_orders_the_same_flows_its_own_way():
    bw = 100e6  # bytes/s; now = 1.0
    mfs = assign_levels("mfs", FLOWS, 1.0, bw)
    assert mfs["p2d-tight"] == 0  # MLU 0.8: the reserved top level
    assert mfs["reuse"] == 2  # RLI 1
    assert mfs["p2d-loose"] == 6  # MLU 0.0125 = theta_6: deferred near the bottom
    assert set(assign_levels("fair", FLOWS, 1.0, bw).values()) == {7}
    sjf = assign_levels("sjf", FLOWS, 1.0, bw)
    assert sjf["p2d-loose"] < sjf["reuse"] < sjf["p2d-tight"]
    edf = assign_levels("edf", FLOWS, 1.0, bw)
    assert edf["p2d-tight"] < edf["p2d-loose"] < edf["reuse"]
    karuna = assign_levels("karuna", FLOWS, 1.0, bw)
    assert karuna["p2d-tight"] == karuna["p2d-loose"] == 0
    assert karuna["reuse"] == 1 + sjf["reuse"]  # the rest by size, below deadline flows
    assert karuna_min_rate(40e6, 1.5, 1.0) == pytest.approx(80e6)
    with pytest.raises(ValueError, match="unknown flow policy"):
        assign_levels("lifo", FLOWS, 1.0, bw)


def test_sjf_and_edf_are_buckets_a_sender_can_compute_alone():
    # alone on a 100 MB/s path: 1 MB takes 10 ms (level 0), 4 MB 40 ms (two doublings)
    assert sjf_level(1e6, 100e6) == 0 and sjf_level(4e6, 100e6) == 2
    assert sjf_level(1e12, 100e6) == 7  # capped at the bottom
    assert edf_level(1.05, now=1.0) == 0 and edf_level(1.4, now=1.0) == 2
    assert edf_level(1e6, now=0.0) == 6  # explicit deadlines stay above implicit ones
    assert edf_level(None, now=0.0) == 7
    assert edf_level(0.5, now=1.0) == 0  # overdue: most urgent


def test_pruned_requests_go_below_every_level():
    assert scavenger_level(8) == 8
    # one sender, 1 s of link each: a (due 1 s) and c (due 2 s) fit, b (2 s of work) does not
    jobs = [Job("a", 1.0, 1.0), Job("b", 1.5, 2.0), Job("c", 2.0, 1.0)]
    assert prune_infeasible(jobs, now=0.0) == {"b"}
    assert prune_infeasible(jobs[:1], now=0.0) == set()
    # hopeless alone on its own path, whatever the NIC: pruned first
    assert prune_infeasible([Job("x", 1.0, 0.1, alone_s=1.5), Job("y", 2.0, 1.0)], 0.0) == {"x"}
    # the rules: only the hopeless, or nothing
    both = [Job("x", 1.0, 0.1, alone_s=1.5), *jobs]
    assert prune_infeasible(both, 0.0, "feasibility") == {"x", "b"}
    assert prune_infeasible(both, 0.0, "alone") == {"x"}
    assert prune_infeasible(both, 0.0, "none") == set()


def test_mfs_promotes_a_deferred_flow_as_its_deadline_nears_and_keeps_it_up():
    flow = [FlowView("p2d", 10e6, deadline=10.0)]
    early = assign_levels("mfs", flow, now=0.0, bandwidth=100e6)["p2d"]
    late = assign_levels("mfs", flow, now=9.88, bandwidth=100e6, current={"p2d": early})["p2d"]
    assert early == 7 and late == 0
    # the flow got bandwidth and its MLU fell again: still not demoted
    again = assign_levels("mfs", [FlowView("p2d", 1e3, deadline=10.0)], now=9.9,
                          bandwidth=100e6, current={"p2d": late})["p2d"]
    assert again == 0


def test_flow_policies_run_in_the_flow_simulator(write_scenario):
    from testbed.cells import check_conservation
    from testbed.flowsim.simulator import simulate
    from testbed.metrics import summarize
    from testbed.scenario import load_scenario
    from testbed.workloads.build import build_workload

    text = ("name: prio\nschedulers: [netkv-full]\n"
            "workload: {trace: TRACE, profile: rag, load: 1.2, warmup_s: 2, measure_s: 8}\n"
            "network: {flow_policy: POLICY, background: {tier3: 0.3}}\n")
    xfer, levels = {}, {}
    for policy in ("fair", "mfs", "sjf", "edf", "karuna"):
        sc = load_scenario(write_scenario(text.replace("POLICY", policy), f"{policy}.yaml"))
        wl = build_workload(sc, sc.seed)
        result = simulate(sc, "netkv-full", sc.seed, wl)
        check_conservation(result.requests, len(wl.requests))
        summary = summarize(result.requests, result.links, wl.slo_s, wl.measure_s)
        xfer[policy] = summary["transfer_mean_ms"]
        assert summary["p2d_earliness_mean_ms"] == summary["p2d_earliness_mean_ms"]  # a number
        levels[policy] = result.counters["level_bytes"]
        moved = sum(t["bytes"] for t in result.transfers)
        assert sum(levels[policy].values()) == pytest.approx(moved, rel=1e-6)
    assert xfer["sjf"] < xfer["fair"]  # shortest first cuts the mean transfer time
    assert xfer["karuna"] > xfer["fair"]  # deadline flows paced to just-in-time rates
    assert xfer["mfs"] != xfer["fair"]  # deferral changes who gets the link when
    assert set(levels["fair"]) == {"0"}  # one class
    assert len(levels["mfs"]) > 1  # bytes moved at several levels as flows were promoted
