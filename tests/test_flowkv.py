"""FlowKV (issue 8): load scores, regimes, the role-switch lifecycle, per-call overhead,
and FlowKV-LA in the flow simulator."""

from __future__ import annotations

import pytest

from testbed.model import flowkv, granularity
from testbed.model.flowkv import NodeState, Thresholds


def test_load_scores_weigh_normalised_queues_and_utilisations():
    idle = NodeState()
    assert flowkv.load_score(idle, "prefill") == 0.0
    full = NodeState(prefill={"running": 1, "waiting": 40, "sending": 9}, token_budget=1.0,
                     gpu_util=1.0)
    assert flowkv.load_score(full, "prefill") == pytest.approx(1.0)  # weights sum to 1
    half = NodeState(prefill={"running": 1, "waiting": 2})  # waiting 2 of a cap of 4
    w = flowkv.PREFILL_WEIGHTS
    assert flowkv.load_score(half, "prefill") == pytest.approx(w.running + w.waiting * 0.5)
    busy_decode = NodeState(decode={"running": 0.5}, kv_util=0.8, mem_bw_util=0.5)
    d = flowkv.DECODE_WEIGHTS
    assert flowkv.load_score(busy_decode, "decode") == pytest.approx(
        d.running * 0.5 + d.kv_util * 0.8 + d.mem_bw_util * 0.5)
    assert flowkv.cluster_score([0.2, 0.4]) == pytest.approx(0.3)


def test_the_sliding_window_smooths_bursts():
    win = flowkv.SlidingWindow(window_s=2.0)
    win.add(0.0, NodeState(gpu_util=1.0))
    win.add(1.0, NodeState(gpu_util=0.0))
    assert win.mean().gpu_util == pytest.approx(0.5)
    win.add(3.5, NodeState(gpu_util=0.0))  # the sample at t=0 has left the window
    assert win.mean().gpu_util == 0.0


TH = Thresholds(prefill_low=0.5, prefill_high=0.9, decode_low=0.5, decode_high=0.9, idle=0.25)


@pytest.mark.parametrize("c_p, c_d, expected", [
    (0.3, 0.2, "normal"), (0.7, 0.1, "imbalanced"), (0.2, 0.8, "imbalanced"),
    (0.95, 0.1, "extreme"), (0.5, 0.5, "normal")])
def test_regimes_follow_the_thresholds(c_p, c_d, expected):
    assert flowkv.regime(c_p, c_d, TH) == expected


def test_an_imbalanced_prefill_side_switches_idle_decode_nodes():
    plan = flowkv.plan_cycle({"p0": 0.8, "p1": 0.6}, {"d0": 0.1, "d1": 0.4, "d2": 0.05}, TH)
    assert plan.regime == "imbalanced"
    assert plan.to_prefill == ("d2", "d0") and plan.to_decode == ()  # idlest first
    extreme = flowkv.plan_cycle({"p0": 1.0}, {"d0": 0.1}, TH)
    assert extreme.regime == "extreme" and "prefill" in extreme.scale_hint
    assert flowkv.plan_cycle({"p0": 0.1}, {"d0": 0.1}, TH).stop
    other_way = flowkv.plan_cycle({"p0": 0.1}, {"d0": 0.8}, TH)
    assert other_way.to_decode == ("p0",) and other_way.to_prefill == ()


def test_a_switch_lasts_its_cycles_and_stops_when_load_is_normal():
    switches = flowkv.RoleSwitches(cycles=2)
    hot = flowkv.Plan("imbalanced", 0.7, 0.1, to_prefill=("d0",))
    assert switches.apply(hot, ["d0"]) == (["d0"], [])
    cool = flowkv.Plan("imbalanced", 0.7, 0.1)
    assert switches.apply(cool, ["d0"]) == ([], [])  # one cycle left
    assert switches.apply(cool, ["d0"]) == ([], ["d0"])  # its cycles are up
    switches.apply(hot, ["d0"])
    assert switches.apply(flowkv.Plan("normal", 0.1, 0.1, stop=True), ["d0"]) == ([], ["d0"])
    assert switches.apply(hot, []) == ([], [])  # not switchable (dead, or wrong role)
    assert [e for _, e in switches.log] == ["switch", "return", "switch", "return"]


def test_transfer_calls_per_mode_and_their_overhead():
    # 1000 tokens in 16-token blocks = 63 blocks; 80 layers, K and V apart
    assert granularity.transfer_calls("contiguous", 1000, 16, 80) == 1
    assert granularity.transfer_calls("block", 1000, 16, 80) == 2 * 80 * 63
    assert granularity.transfer_calls("segment", 1000, 16, 80, segment_blocks=16) == 4
    assert granularity.call_overhead_s(1, 0.01) == 0.0
    assert granularity.call_overhead_s(101, 0.01) == pytest.approx(1.0)
    parts = granularity.split_bytes(1003, 4)
    assert sum(parts) == 1003 and max(parts) - min(parts) <= 1
    with pytest.raises(ValueError, match="unknown transfer mode"):
        granularity.transfer_calls("scatter", 10, 16, 80)


def test_flowkv_switches_decode_nodes_under_prefill_imbalance(write_scenario):
    """Slow prefill nodes: FlowKV-LA switches idle decode nodes to prefill work, serves
    requests there (decoded in place) and beats fixed-role NetKV-Full on TTFT."""
    from testbed.cells import check_conservation
    from testbed.flowsim.simulator import simulate
    from testbed.metrics import summarize
    from testbed.scenario import load_scenario
    from testbed.workloads.build import build_workload

    sc = load_scenario(write_scenario(
        "name: imb\nschedulers: [netkv-full, flowkv]\n"
        "cluster: {slowdown: {i0: 3.0, i1: 3.0}}\n"
        "workload: {trace: TRACE, profile: rag, load: 0.9}\n", "imb.yaml"))
    wl = build_workload(sc, sc.seed)
    ttft = {}
    for key in ("netkv-full", "flowkv"):
        result = simulate(sc, key, sc.seed, wl)
        check_conservation(result.requests, len(wl.requests))
        ttft[key] = summarize(result.requests, result.links, wl.slo_s, wl.measure_s)["ttft_mean_ms"]
        if key == "flowkv":
            assert result.counters["role_switches"] > 0
            hybrid = [r for r in result.requests if r["prefill"] not in ("i0", "i1", "i2", "i3")]
            assert hybrid and all(r["state"] == "completed" for r in hybrid)
            assert any(r["decode"] == r["prefill"] and r["tier"] == 0 for r in hybrid)
    assert ttft["flowkv"] < ttft["netkv-full"]


def test_per_call_overhead_lengthens_transfers_in_the_flow_model(write_scenario):
    from testbed.flowsim.simulator import simulate
    from testbed.scenario import load_scenario
    from testbed.workloads.build import build_workload

    means = {}
    for mode in ("contiguous", "segment", "block"):
        sc = load_scenario(write_scenario(
            "name: calls\nschedulers: [rr]\n"
            "workload: {trace: TRACE, profile: rag, load: 0.5, measure_s: 5}\n"
            f"network: {{transfer_mode: {mode}, per_call_s: 0.00001}}\n", f"{mode}.yaml"))
        wl = build_workload(sc, sc.seed)
        rows = simulate(sc, "rr", sc.seed, wl).requests
        means[mode] = sum(r["transfer_end"] - r["transfer_start"] for r in rows) / len(rows)
    assert means["contiguous"] < means["segment"] < means["block"]


def test_a_prefill_node_takes_decode_work_when_the_decode_side_is_hot(write_scenario):
    """The other direction, in the flow simulator: with decode batches full and prefill
    idle, idle prefill nodes get a decode engine and receive requests to decode."""
    from testbed.cells import check_conservation
    from testbed.flowsim.simulator import simulate
    from testbed.scenario import load_scenario
    from testbed.workloads.build import build_workload

    sc = load_scenario(write_scenario(
        "name: hot-decode\nschedulers: [flowkv]\ncluster: {beta_max: 4}\n"
        "workload: {trace: null, profile: all, load: 0.8, measure_s: 10,\n"
        "           synthetic: {mean_input: 8000, mean_output: 1500}}\n"
        "flowkv: {prefill_low: 0.5, decode_low: 0.2, idle: 0.4}\n", "hot.yaml"))
    wl = build_workload(sc, sc.seed)
    result = simulate(sc, "flowkv", sc.seed, wl)
    check_conservation(result.requests, len(wl.requests))
    prefill_pool = {i.name for i in sc.cluster.spec().prefill_pool}
    decoded_on_prefill = [r for r in result.requests if r["decode"] in prefill_pool]
    assert decoded_on_prefill and all(r["state"] == "completed" for r in decoded_on_prefill)
    assert result.counters["role_switches"] > 0
