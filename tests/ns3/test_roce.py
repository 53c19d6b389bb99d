"""RoCE on the ns-3 program behaving as published, on small fabrics at the replica's rung
(testbed/ns3sim/roce_fabrics.py, 1e-2 of 40 Gbit/s, DCQCN's times 100x slower), and the
engine's refusals. Times below are modelled; x SCALE gives the real fabric's."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testbed.ns3sim.check import check_scenario, roce_packets
from testbed.ns3sim.roce_fabrics import LINE_BPS, MB, SCALE, chain, ring, star
from testbed.scenario import ScenarioError, load_scenario
from tests.conftest import ROOT

MS = 1_000_000  # ns


def test_two_flows_on_one_bottleneck_converge_to_fair_shares():
    f = star(2)
    try:
        f.flow(0, "h0", "r", 200 * MB)
        f.run(50 * MS)
        f.flow(50 * MS, "h1", "r", 200 * MB)
        prev, fair_at, shares = f.received(50 * MS), None, []
        for t in range(300 * MS, 6000 * MS + 1, 250 * MS):
            got = f.received(t)
            rates = [(got[k] - prev.get(k, 0)) * 8 / 0.25 for k in (1, 2)]
            prev = got
            shares.append(sum(rates) / (LINE_BPS * SCALE))
            if fair_at is None and min(rates) > 0.85 * max(rates):
                fair_at = t - 50 * MS
        st = f.pfc(6000 * MS)
    finally:
        f.close()
    # within 4 modelled s (40 ms on the real 40 Gbit/s fabric), the link kept busy
    assert fair_at is not None and fair_at <= 4000 * MS, shares
    assert sum(shares[-8:]) / 8 > 0.85
    assert st.cnps > 0 and st.links[("s", "r")].marks > 0 and st.timeouts == 0


def test_an_incast_keeps_the_queue_under_kmax_with_nothing_lost():
    f = star(8)
    try:
        for i in range(8):
            f.flow(0, f"h{i}", "r", 20 * MB)
        late = [f.pfc(t).links[("s", "r")].kv_now for t in range(1000 * MS, 3000 * MS, 50 * MS)]
        st = f.pfc(6000 * MS)
        done = dict(f.done)
    finally:
        f.close()
    assert len(done) == 8 and max(late) < 200e3  # the default Kmax, once DCQCN has cut
    assert sum(lk.kv_drops for lk in st.links.values()) == 0
    assert st.naks == st.timeouts == 0


def test_pfc_pauses_propagate_hop_by_hop_and_release():
    # ECN out of reach: PFC alone holds the incast at s1's port to r
    f = chain(4, {"kmin_kb": 1e6, "kmax_kb": 2e6, "pfc_xoff_kb": 64})
    try:
        for h in ("h0", "h1", "h2", "h3", "x"):
            f.flow(0, h, "r", 10 * MB)
        mid = f.pfc(200 * MS)
        end = f.pfc(3000 * MS)
        done = dict(f.done)
    finally:
        f.close()
    paused = {hop for hop, lk in mid.links.items() if lk.pauses}
    assert ("s0", "s1") in paused and ("x", "s1") in paused  # s1 paused its upstreams
    assert {("h0", "s0"), ("h1", "s0")} <= paused  # and s0, backed up, paused the NICs
    assert all(lk.max_ingress <= 64e3 + lk.headroom for lk in mid.links.values())
    assert len(done) == 5 and not any(lk.paused_now for lk in end.links.values())
    assert sum(lk.kv_drops for lk in end.links.values()) == 0 and not end.trips


def test_a_cycle_of_pauses_trips_the_watchdog_which_names_it_and_the_flows_end():
    # routes that are not up-down (a ring, two hops clockwise): PFC's deadlock
    f = ring({"kmin_kb": 1e6, "kmax_kb": 2e6, "pfc_xoff_kb": 32, "watchdog_ms": 20,
              "restore_ms": 20})
    try:
        for s, d in (("ha", "hc"), ("hb", "ha"), ("hc", "hb")):
            f.flow(0, s, d, 20 * MB)
        stuck, ended_by_then = f.pfc(1900 * MS), dict(f.done)
        st = f.pfc(20000 * MS)
        done = dict(f.done)
    finally:
        f.close()
    assert stuck.links[("A", "B")].paused_now and not ended_by_then  # deadlocked
    tripped = {(a, b) for a, b, _ in st.trips}
    assert {("A", "B"), ("B", "C"), ("C", "A")} <= tripped
    assert all(t >= 20 * MS / SCALE for _, _, t in st.trips)  # 20 real ms, slowed
    assert len(done) == 3 and st.naks + st.timeouts > 0  # what it dropped was sent again


def test_the_fat_tree_runs_roce_without_deadlock_or_loss(tmp_path):
    from testbed.cells import Task
    from testbed.runner import run_task

    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1, "workload.measure_s": 2,
                        "ns3.transport": "roce", "ns3.scale": 1e-2})
    result = run_task(Task(0, {}, sc, "netkv-full", 1, engine="ns3"))
    facts = result["files"]["ns3.json"]
    roce = facts["roce"] if isinstance(facts, dict) else __import__("json").loads(facts)["roce"]
    assert roce["watchdog_trips"] == [] and roce["kv_drops"] == 0
    assert roce["marks"] > 0 and roce["cnps"] > 0
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
