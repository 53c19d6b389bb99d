"""The NetKV paper's own worked numbers (sections III-B, III-D, IV-C, V-D)."""

import pytest

from testbed.model.cost import (
    effective_bandwidth,
    gbps_to_bytes_per_s,
    near_instance_wins,
    staleness_tolerance,
    transfer_time,
    us_to_s,
)
from testbed.model.kv import (
    MODEL_PRESETS,
    effective_transfer_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    kv_shard_bytes,
)
from testbed.model.oracle import Oracle
from testbed.model.schedulers import Candidate, RequestInfo, SchedulerContext, make_scheduler
from testbed.model.timing import TimingModel

GB = 1e9


def test_llama3_70b_is_320_kb_per_token_and_80_kb_per_tp4_shard():
    model = MODEL_PRESETS["llama-3-70b"]
    assert kv_bytes_per_token(model) == 320 * 1024
    assert kv_shard_bytes(model, 1, tp=4) == 80 * 1024


def test_opt13b_kv_per_token():
    # 2 * 40 layers * 40 heads * 128 * 2 bytes = 800 KB
    assert kv_bytes_per_token(MODEL_PRESETS["opt-13b"]) == 800 * 1024


def test_kv_size_is_linear_in_tokens_eq1():
    model = MODEL_PRESETS["llama-3-70b"]
    assert kv_cache_bytes(model, 32768) == 32768 * 320 * 1024
    # the paper rounds 320 KB x 32,768 to "about 10 GB"
    assert kv_cache_bytes(model, 32768) / 2**30 == pytest.approx(10.0)


def test_effective_size_eq2():
    assert effective_transfer_bytes(10 * GB, 16384, 32768) == pytest.approx(5 * GB)
    assert effective_transfer_bytes(10 * GB, 0, 32768) == 10 * GB
    with pytest.raises(ValueError):
        effective_transfer_bytes(10 * GB, 40000, 32768)


def test_section_3d_worked_example():
    b2, b3 = gbps_to_bytes_per_s(50), gbps_to_bytes_per_s(25)
    assert b2 == pytest.approx(6.25 * GB) and b3 == pytest.approx(3.125 * GB)
    # d1: same pod, 50% hit, one own transfer in flight; d2: cross pod, 90% hit, idle
    beff1 = effective_bandwidth(b2, 0.2, 1)
    beff2 = effective_bandwidth(b3, 0.2, 0)
    assert beff1 == pytest.approx(2.5 * GB) and beff2 == pytest.approx(2.5 * GB)
    assert transfer_time(5 * GB, beff1, 0.0) == pytest.approx(2.0)
    assert transfer_time(1 * GB, beff2, 0.0) == pytest.approx(0.4)
    # cross-pod congestion 0.5: 1.56 GB/s and 0.64 s
    beff2_hot = effective_bandwidth(b3, 0.5, 0)
    assert beff2_hot / GB == pytest.approx(1.5625)
    assert transfer_time(1 * GB, beff2_hot, 0.0) == pytest.approx(0.64)
    # latency adds, in seconds
    assert transfer_time(1 * GB, beff2, us_to_s(15)) == pytest.approx(0.400015)


def test_netkv_follows_the_worked_example_and_congestion_flips_it():
    """NetKV-Full picks the warm cross-pod d2, then d1 once c3 = 0.5 and queues favour d1."""
    timing = TimingModel(iter_base_s=0.012, iter_per_seq_s=0.0)
    ctx = SchedulerContext(timing, beta_max=64)
    tokens = 32768
    request = RequestInfo("r", tokens, 10 * GB)
    oracle = Oracle(
        tier_map={("p", "d1"): 2, ("p", "d2"): 3},
        tier_bandwidth_gbps={2: 50.0, 3: 25.0},
        tier_latency_us={2: 8.0, 3: 15.0},
        congestion={2: 0.2, 3: 0.2},
    )
    d1 = Candidate("d1", 1e12, queued=0, batch=0, hit_tokens=tokens // 2)
    d2 = Candidate("d2", 1e12, queued=0, batch=0, hit_tokens=int(tokens * 0.9))
    sched = make_scheduler("netkv-full", ctx)
    sched.inflight.increment(2, "p")  # one own transfer already in flight on tier 2
    assert sched.select(request, "p", [d1, d2], oracle).decode == "d2"
    # congestion alone: 0.64 s still beats 2.0 s
    hot = oracle.with_congestion({2: 0.2, 3: 0.5}, 1.0)
    sched = make_scheduler("netkv-full", ctx)
    sched.inflight.increment(2, "p")
    assert sched.select(request, "p", [d1, d2], hot).decode == "d2"
    # hot congestion plus a queue on d2 worth more than the remaining gap: d1 wins
    d2_busy = Candidate("d2", 1e12, queued=64 + 120, batch=64, hit_tokens=int(tokens * 0.9))
    sched = make_scheduler("netkv-full", ctx)
    sched.inflight.increment(2, "p")
    decision = sched.select(request, "p", [d1, d2_busy], hot)
    assert decision.decode == "d1"
    assert decision.predicted_transfer_s == pytest.approx(2.0, abs=1e-4)


def test_proposition1_example_one_less_than_two():
    # rho1 = 0, rho2 = 0.5, equal congestion and queues, k = 4: 1 < 4 * 0.5 = 2
    assert near_instance_wins(0.0, 0.5, 4.0, 0.3, 0.3)
    # a much warmer far instance (rho2 = 0.9) makes 1 < 0.4 false
    assert not near_instance_wins(0.0, 0.9, 4.0, 0.3, 0.3)


def test_proposition2_bound_is_042_at_4_to_1_and_c03():
    assert staleness_tolerance(4.0, 0.3, 1.0, 0.3) == pytest.approx(0.42)
    # near saturation of the fast tier there is no tolerance
    assert staleness_tolerance(4.0, 0.99, 1.0, 0.3) < 0
