"""The control plane both engines run (testbed/control/plane.py): in-flight bookkeeping that
is released exactly once, recovery that survives cascades, and conservation of requests
under random fault schedules in the flow simulator."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.cells import check_conservation
from testbed.flowsim.simulator import FlowSimulation
from testbed.lifecycle import TERMINAL_STATES
from testbed.scenario import load_scenario
from testbed.workloads.build import build_workload
from tests.conftest import ROOT

BASE = ROOT / "scenarios" / "default.yaml"


def base(**over):
    sc = load_scenario(BASE)
    return sc.with_overrides({"workload.profile": "rag", "workload.load": 1.0,
                              "workload.warmup_s": 1.0, "workload.measure_s": 6.0, **over})


def run_sim(sc, scheduler: str, seed: int | None = None):
    """One flow-simulator run; checks every request ends once and nothing stays counted
    in flight. Returns the simulation (for its plane and scheduler) and its result."""
    seed = sc.seed if seed is None else seed
    wl = build_workload(sc, seed)
    sim = FlowSimulation(sc, scheduler, seed, wl)
    result = sim.run()
    check_conservation(result.requests, len(wl.requests))
    assert {r["state"] for r in result.requests} <= set(TERMINAL_STATES)
    assert sim.plane.in_flight() == 0, "a transfer stayed counted in flight"
    counts = sim.scheduler.inflight._counts
    assert all(v == 0 for v in counts.values()), dict(counts)
    return sim, result


CASCADE = [{"at_s": 6.0, "kind": "decode_down", "target": "i4"},
           {"at_s": 6.2, "kind": "decode_down", "target": "i9"},
           {"at_s": 7.5, "kind": "decode_down", "target": "i12"},
           {"at_s": 7.6, "kind": "decode_down", "target": "i6"}]


@pytest.mark.parametrize("policy", ["adaptive", "always_recompute", "always_migrate"])
@pytest.mark.parametrize("scheduler", ["rr", "cla", "netkv-full"])
def test_four_decode_deaths_within_two_seconds_lose_nothing(policy, scheduler):
    """A recompute target that dies before its KV is ready was counted in flight twice
    by the flow simulator once (ValueError: transfer_done with nothing in flight)."""
    sc = base(**{"recovery.policy": policy, "faults": CASCADE,
                 "workload.measure_s": 8.0})
    decode = {i.name for i in sc.cluster.spec().decode_pool}
    assert {f["target"] for f in CASCADE} <= decode
    sim, result = run_sim(sc, scheduler)
    recovered = [r for r in result.requests if r["recovery"]]
    assert recovered, "the cascade hit no request"
    decisions = result.counters["recovery_decisions"]
    served = Counter(r["state"] for r in recovered)
    assert decisions["migrate"] >= served["migrated"]
    assert decisions["recompute"] >= served["recomputed"]
    assert decisions["abort"] == served["aborted"]
    assert all(r["decode"] not in {f["target"] for f in CASCADE}
               for r in result.requests if r["state"] in ("migrated", "recomputed"))


def _fault(draw, spec) -> dict:
    decode = sorted(i.name for i in spec.decode_pool)
    tors = sorted({lk.a for lk in spec.links if lk.a.startswith("tor")}
                  | {lk.b for lk in spec.links if lk.b.startswith("tor")})
    links = sorted(f"{lk.a}-{lk.b}" for lk in spec.links
                   if not lk.a.startswith("i") and not lk.b.startswith("i"))
    at = draw(st.floats(0.5, 7.0))
    kind = draw(st.sampled_from(["decode_down", "decode_down", "link_down", "tor_down",
                                 "controller_down"]))
    if kind == "decode_down":
        return {"at_s": at, "kind": kind, "target": draw(st.sampled_from(decode))}
    duration = draw(st.floats(0.2, 3.0))
    if kind == "controller_down":
        return {"at_s": at, "kind": kind, "duration_s": duration}
    target = draw(st.sampled_from(links if kind == "link_down" else tors))
    return {"at_s": at, "kind": kind, "target": target, "duration_s": duration}


@st.composite
def schedules(draw):
    spec = load_scenario(BASE).cluster.spec()
    faults = [_fault(draw, spec) for _ in range(draw(st.integers(1, 6)))]
    return {"faults": sorted(faults, key=lambda f: f["at_s"]),
            "policy": draw(st.sampled_from(["adaptive", "always_recompute",
                                            "always_migrate"])),
            "scheduler": draw(st.sampled_from(["rr", "cla", "netkv-full", "flowkv"])),
            "seed": draw(st.integers(1, 50)),
            "slots": draw(st.sampled_from([1, 2, 32]))}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedules())
def test_any_fault_schedule_conserves_requests_and_in_flight_counts(plan):
    """Decode deaths (cascades, a recovery target dying too), link and ToR downs and
    controller stops at random times: every request ends in exactly one terminal state,
    no count stays in flight, the run finishes (run_sim checks)."""
    sc = base(**{"faults": plan["faults"], "recovery.policy": plan["policy"],
                 "recovery.migration_slots": plan["slots"],
                 "recovery.heartbeat_s": 0.2, "recovery.missed_heartbeats": 2})
    _, result = run_sim(sc, plan["scheduler"], plan["seed"])
    died = {}
    for f in plan["faults"]:
        if f["kind"] == "decode_down":
            died.setdefault(f["target"], f["at_s"])
    for r in result.requests:  # nothing is served by an instance after it died
        if r["state"] in ("migrated", "recomputed", "completed") and r["decode"] in died:
            assert r["done"] <= died[r["decode"]] + 1e-9, r


def test_the_earliest_free_prefill_is_the_scan_s_choice_as_queues_grow_and_shrink():
    """The heap picks what min over every instance by (free_at, name) picks, through
    enqueues, stalls, ties and a pool that loses instances."""
    import random
    from types import SimpleNamespace

    from testbed.serving import EarliestFree

    rng = random.Random(7)
    pool = {f"i{k}": SimpleNamespace(name=f"i{k}", free_at=rng.choice([0.0, 1.0, 2.5]))
            for k in range(40)}
    earliest = EarliestFree()
    for step in range(2000):
        want = min(pool.values(), key=lambda p: (p.free_at, p.name))
        got = earliest.pick(pool)
        assert got is want, step
        got.free_at = max(step * 0.01, got.free_at) + rng.choice([0.0, 0.5, 3.0])  # enqueue
        stalled = rng.choice(list(pool.values()))
        stalled.free_at += rng.choice([0.0, 0.2])  # a late fetch
        if step % 400 == 399:
            del pool[rng.choice(sorted(pool))]  # an instance died
