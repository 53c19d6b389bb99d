"""Faults in the flow simulator: decode deaths recovered by policy, links and ToRs that
fail and return, a stopped controller, a background surge (issue 6)."""

from __future__ import annotations

from collections import Counter

import pytest

from testbed.cells import check_conservation
from testbed.flowsim.simulator import simulate
from testbed.lifecycle import TERMINAL_STATES
from testbed.scenario import ScenarioError, load_scenario
from testbed.workloads.build import build_workload

BASE = """
name: faults
schedulers: [netkv-full]
workload: {trace: TRACE, profile: rag, load: 1.0, warmup_s: 2, measure_s: 8}
"""


def run(write_scenario, extra: str, scheduler: str = "netkv-full"):
    sc = load_scenario(write_scenario(BASE + extra))
    wl = build_workload(sc, sc.seed)
    result = simulate(sc, scheduler, sc.seed, wl)
    check_conservation(result.requests, len(wl.requests))
    assert {r["state"] for r in result.requests} <= set(TERMINAL_STATES)
    return result


@pytest.mark.parametrize("policy, action, state", [
    ("always_migrate", "migrate", "migrated"), ("always_recompute", "recompute", "recomputed")])
def test_a_dead_decode_instances_requests_are_recovered_by_the_policy(
        write_scenario, policy, action, state):
    result = run(write_scenario, f"""
recovery: {{policy: {policy}, heartbeat_s: 0.2, missed_heartbeats: 2}}
faults: [{{at_s: 4.0, kind: decode_down, target: i6}}]
""")
    affected = [r for r in result.requests if r["recovery"]]
    assert affected, "the fault hit no request"
    assert {r["recovery"] for r in affected} <= {action, "abort"}
    assert any(r["state"] == state for r in affected)
    for r in affected:
        if r["state"] == "aborted":
            assert "TTFT budget" in r["reason"]
        else:
            assert r["decode"] != "i6" and r["first_token"] is not None
    late = [r for r in result.requests if r["transfer_start"] and r["transfer_start"] > 4.5]
    assert all(r["decode"] != "i6" for r in late)  # once detected, never chosen again
    decisions = result.counters["recovery_decisions"]
    assert decisions[action] == sum(r["state"] == state for r in affected)


def test_a_failed_link_and_a_failed_tor_come_back_and_every_request_completes(write_scenario):
    result = run(write_scenario, """
faults:
  - {at_s: 3.0, kind: link_down, target: agg0-core0, duration_s: 3}
  - {at_s: 4.0, kind: tor_down, target: tor2, duration_s: 2}
""")
    assert Counter(r["state"] for r in result.requests) == {"completed": len(result.requests)}
    assert result.counters["faults_injected"] == 2


def test_a_stopped_controller_ages_the_oracle_into_the_static_fallback(write_scenario):
    quick = run(write_scenario, """
recovery: {oracle_max_age_s: 1.0}
faults: [{at_s: 2.0, kind: controller_down, duration_s: 5}]
""")
    assert quick.counters["stale_oracle_decisions"] > 0
    healthy = run(write_scenario, "recovery: {oracle_max_age_s: 1.0}\n")
    assert healthy.counters["stale_oracle_decisions"] == 0


def test_a_background_surge_on_a_tier_moves_netkv_off_it(write_scenario):
    calm = run(write_scenario, "")
    surge = run(write_scenario, """
faults: [{at_s: 0.0, kind: background, tier: 3, fraction: 0.8, duration_s: 60}]
""")
    share = lambda res: sum(r["tier"] == "3" or r["tier"] == 3 for r in res.requests)  # noqa: E731
    assert share(surge) < share(calm)


@pytest.mark.parametrize("fault, message", [
    ("{at_s: 1, kind: decode_down, target: i0}", "not a decode instance"),
    ("{at_s: 1, kind: link_down, target: tor0-core0}", "not a link"),
    ("{at_s: 1, kind: background, tier: 3}", "needs fraction"),
    ("{at_s: 1, kind: decode_down, target: i6, duration_s: 2}", "does not come back"),
])
def test_bad_faults_are_named(write_scenario, fault, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario(write_scenario(BASE + f"faults: [{fault}]\n"))
