"""Model-layer units: timing, queueing, oracle, schedulers."""

import json

import pytest

from testbed.model.cost import effective_bandwidth, queue_delay
from testbed.model.inflight import InflightCounter
from testbed.model.oracle import Oracle, TransferIntent
from testbed.model.schedulers import (
    SCHEDULERS,
    Candidate,
    RequestInfo,
    SchedulerContext,
    make_scheduler,
)
from testbed.model.timing import TimingModel, prefill_capacity_rps

GB = 1e9
TIMING = TimingModel()


def oracle(congestion=None):
    return Oracle(
        tier_map={("p", "a"): 2, ("p", "b"): 3, ("p", "c"): 3},
        tier_bandwidth_gbps={2: 50.0, 3: 25.0},
        tier_latency_us={2: 8.0, 3: 15.0},
        congestion=congestion or {},
    )


def test_timing_model_defaults_and_overrides():
    assert TIMING.iteration_time(0) == pytest.approx(0.012)
    assert TIMING.iteration_time(50) == pytest.approx(0.012 + 50 * 2e-5)
    assert TIMING.prefill_time(10000) == pytest.approx(0.6 + 0.02)
    custom = TimingModel(iter_base_s=0.02, iter_per_seq_s=0.001)
    assert custom.iteration_time(10) == pytest.approx(0.03)
    with pytest.raises(ValueError):
        TIMING.iteration_time(-1)


def test_capacity_is_prefill_pool_service_rate():
    timing = TimingModel(prefill_per_token_s=1e-4, prefill_base_s=0.0)
    # mean prefill 1 s on 4 instances -> 4 req/s
    assert prefill_capacity_rps(timing, [5000, 15000], 4) == pytest.approx(4.0)


def test_queue_delay_eq6():
    assert queue_delay(queued=3, batch=10, beta_max=64, iteration_time=0.013) == 0.0
    assert queue_delay(queued=5, batch=62, beta_max=64, iteration_time=0.013) == pytest.approx(
        3 * 0.013)


def test_effective_bandwidth_rejects_bad_congestion():
    with pytest.raises(ValueError):
        effective_bandwidth(1.0, 1.0, 0)
    with pytest.raises(ValueError):
        effective_bandwidth(1.0, 0.1, -1)


def test_oracle_round_trips_through_json():
    o = oracle({2: 0.1, 3: 0.25})
    back = Oracle.from_dict(json.loads(json.dumps(o.to_dict())))
    assert back == o
    assert back.bandwidth(3) == pytest.approx(25e9 / 8)
    assert back.age(10.0) == 10.0
    with pytest.raises(ValueError, match="malformed oracle"):
        Oracle.from_dict({"tier_map": []})
    with pytest.raises(ValueError, match="congestion"):
        oracle({2: 1.0})


def test_a_new_congestion_reading_keeps_the_maps_and_is_checked():
    o = oracle({2: 0.1})
    hot = o.with_congestion({3: 0.5}, 4.0)
    assert hot == Oracle(o.tier_map, o.tier_bandwidth_gbps, o.tier_latency_us, {3: 0.5}, 4.0)
    assert o.congestion == {2: 0.1} and o.generated_at == 0.0  # the old reading stands
    with pytest.raises(ValueError, match=r"congestion\[3\]"):
        o.with_congestion({3: 1.0}, 5.0)


def test_transfer_intent_validates():
    intent = TransferIntent("r1", "p", "a", 1000, priority=1)
    assert TransferIntent.from_dict(intent.to_dict()) == intent
    with pytest.raises(ValueError):
        TransferIntent("r1", "p", "p", 10)
    with pytest.raises(ValueError, match="malformed"):
        TransferIntent.from_dict({"src": "p"})


def ctx(**kw):
    return SchedulerContext(TIMING, beta_max=kw.pop("beta_max", 64), **kw)


REQ = RequestInfo("r", 10000, 10 * GB)


@pytest.mark.parametrize("key", list(SCHEDULERS))
def test_every_scheduler_rejects_when_nothing_fits(key):
    sched = make_scheduler(key, ctx(memory_reserve_bytes=1 * GB))
    cands = [Candidate("a", 10.5 * GB, 0, 0, 0), Candidate("b", 5 * GB, 0, 0, 0)]
    decision = sched.select(REQ, "p", cands, oracle())
    assert decision.rejected and "memory" in decision.reason


@pytest.mark.parametrize("key", list(SCHEDULERS))
def test_every_scheduler_only_picks_feasible(key):
    sched = make_scheduler(key, ctx(memory_reserve_bytes=1 * GB))
    # "a" is best on every criterion but has no room; only "c" fits (b lacks memory too)
    cands = [Candidate("a", 1 * GB, 0, 0, 9000), Candidate("b", 9 * GB, 0, 0, 0),
             Candidate("c", 20 * GB, 5, 5, 0)]
    for _ in range(3):
        assert sched.select(REQ, "p", cands, oracle()).decode == "c"


def test_memory_feasibility_uses_effective_size():
    sched = make_scheduler("ca", ctx())
    # 90% hit: s_eff = 1 GB fits in 2 GB free
    cands = [Candidate("a", 2 * GB, 0, 0, 9000)]
    assert sched.select(REQ, "p", cands, oracle()).decode == "a"


def test_round_robin_cycles_and_skips_infeasible():
    sched = make_scheduler("rr", ctx())
    full = [Candidate(n, 100 * GB, 0, 0, 0) for n in "abc"]
    picks = [sched.select(REQ, "p", full, oracle()).decode for _ in range(4)]
    assert picks == ["a", "b", "c", "a"]
    partial = [full[0], Candidate("b", 0.0, 0, 0, 0), full[2]]
    assert sched.select(REQ, "p", partial, oracle()).decode == "c"


def test_load_aware_cache_aware_and_cla():
    cands = [Candidate("a", 100 * GB, 0, 40, 8000), Candidate("b", 100 * GB, 0, 2, 0),
             Candidate("c", 100 * GB, 0, 20, 8000)]
    assert make_scheduler("la", ctx()).select(REQ, "p", cands, oracle()).decode == "b"
    # CA: max hit, load breaks the tie between a and c
    assert make_scheduler("ca", ctx()).select(REQ, "p", cands, oracle()).decode == "c"
    # CLA*: weights matter
    cache_heavy = make_scheduler("cla", ctx(), cla_weights=(2.0, 0.1))
    load_heavy = make_scheduler("cla", ctx(), cla_weights=(0.1, 2.0))
    assert cache_heavy.select(REQ, "p", cands, oracle()).decode == "c"
    assert load_heavy.select(REQ, "p", cands, oracle()).decode == "b"


def test_netkv_topo_prefers_faster_tier_and_ignores_congestion():
    cands = [Candidate("a", 100 * GB, 0, 0, 0), Candidate("b", 100 * GB, 0, 0, 0)]
    hot = oracle({2: 0.9, 3: 0.0})
    assert make_scheduler("netkv-topo", ctx()).select(REQ, "p", cands, oracle()).decode == "a"
    assert make_scheduler("netkv-topo", ctx()).select(REQ, "p", cands, hot).decode == "a"
    # Full sees that tier 2 is 90% busy: 50*0.1 = 5 Gbps < 25 Gbps
    assert make_scheduler("netkv-full", ctx()).select(REQ, "p", cands, hot).decode == "b"
    assert make_scheduler("netkv-static", ctx()).select(REQ, "p", cands, hot).decode == "a"


def test_self_contention_spreads_bursts_and_is_released():
    sched = make_scheduler("netkv-static", ctx())
    cands = [Candidate("a", 100 * GB, 0, 0, 0), Candidate("b", 100 * GB, 0, 0, 0)]
    first = sched.select(REQ, "p", cands, oracle())
    assert first.decode == "a" and sched.inflight.raw(2, "p") == 1
    # one in flight halves tier 2 to 25 Gbps: equal to tier 3, lower latency keeps "a"
    assert sched.select(REQ, "p", cands, oracle()).decode == "a"
    # two in flight: 50/3 < 25 Gbps, so the burst spills to the cross-pod instance
    assert sched.select(REQ, "p", cands, oracle()).decode == "b"
    sched.transfer_done("p", 2)
    sched.transfer_done("p", 2)
    assert sched.select(REQ, "p", cands, oracle()).decode == "a"
    # Topo-Only never counts
    topo = make_scheduler("netkv-topo", ctx())
    assert [topo.select(REQ, "p", cands, oracle()).decode for _ in range(3)] == ["a"] * 3


def test_inflight_counter_caps_reads_and_refuses_underflow():
    counter = InflightCounter(cap=2)
    for _ in range(5):
        counter.increment(3, "p")
    assert counter.get(3, "p") == 2 and counter.raw(3, "p") == 5
    with pytest.raises(ValueError):
        counter.decrement(2, "p")


def test_unknown_scheduler_names_the_choices():
    with pytest.raises(ValueError, match="netkv-full"):
        make_scheduler("netkv", ctx())


@pytest.mark.parametrize("key", ["la", "ca", "cla", "netkv-topo"])
def test_exact_ties_are_not_broken_by_list_order(key):
    sched = make_scheduler(key, ctx(seed=3))
    same = [Candidate(n, 100 * GB, 0, 0, 0) for n in ("a", "b")]
    tied_oracle = Oracle({("p", "a"): 3, ("p", "b"): 3}, {3: 25.0}, {3: 15.0})
    picks = {sched.select(REQ, "p", same, tied_oracle).decode for _ in range(40)}
    assert picks == {"a", "b"}
