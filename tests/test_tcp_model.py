"""The flow model's TCP terms, the validity floor, and validation statistics (pure)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from testbed.flowsim.network import FluidNetwork
from testbed.model import tcp
from testbed.scenario import ScenarioError, load_scenario
from testbed.validate.engines.flow_replay import replay_transfers
from testbed.validate.judging import decision, model_errors, stats, validity, words
from testbed.validate.judging.calibration import fit_tcp
from testbed.validate.pipelines.pipeline import check_calibration
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "validate.yaml"


@pytest.fixture(scope="module")
def spec():
    return load_scenario(SCENARIO).cluster.spec()


def pair_at(spec, tier):
    names = [i.name for i in spec.instances]
    return next((a, b) for a, b in itertools.permutations(names, 2) if spec.tier(a, b) == tier)


def path_text(path):
    return ">".join([path[0][0]] + [h[1] for h in path])


@pytest.mark.parametrize("tier", [1, 2, 3])
@pytest.mark.parametrize("size", [3e5, 4e7, 6e8, 5e9])
def test_a_lone_flow_in_the_network_takes_the_closed_form_time(spec, tier, size):
    params = tcp.emulation_equivalent(2e-4, 2, 40e-6)
    a, b = pair_at(spec, tier)
    path = spec.paths(a, b)[0]
    net = FluidNetwork(spec, None, None, params)
    rate = min(net.links[h].capacity for h in path)
    (row,) = replay_transfers(spec, [dict(request="r", shard=0, src=a, dst=b, bytes=size,
                                          start=0.0, path=path_text(path))], tcp=params)
    want = tcp.lone_transfer_time(size, rate, net.path_rtt(path, size), params)
    assert row["end"] == pytest.approx(want, rel=1e-9)
    assert row["end"] > size / rate  # the TCP terms only add time


def test_a_stream_smaller_than_a_segment_is_stored_and_forwarded_as_itself():
    params = tcp.TcpParams(mss_bytes=1500.0, serialisation=1.0, hop_delay_s=0.0)
    rates = [1e6, 5e5, 1e6]
    full = tcp.path_rtt(1e-3, rates, params)
    assert full == pytest.approx(2e-3 + 1500 / 1e6 + 1500 / 5e5 + 1500 / 1e6)
    assert tcp.path_rtt(1e-3, rates, params, 3000.0) == pytest.approx(full)
    assert tcp.path_rtt(1e-3, rates, params, 300.0) == pytest.approx(
        2e-3 + 300 / 1e6 + 300 / 5e5 + 300 / 1e6)


def test_slow_start_ramp_doubles_each_round_trip():
    params = tcp.TcpParams(mss_bytes=1000, init_cwnd=2, handshake_rtts=1, tail_rtts=0)
    rtt, rate = 0.01, 1e6  # window fills the rate after log2(1e6*0.01/2000) = 2.3 -> 3 rounds
    assert tcp.ramp_rounds(rate, rtt, params) == 3
    # rounds 0, 1, 2 carry 2, 4, 8 segments: 14 KB in 3 RTTs after the handshake
    assert tcp.lone_transfer_time(14_000, rate, rtt, params) == pytest.approx(4 * rtt)
    assert tcp.lone_transfer_time(2_000, rate, rtt, params) == pytest.approx(2 * rtt)
    # beyond the ramp the rest goes at the rate
    assert tcp.lone_transfer_time(1e6, rate, rtt, params) == pytest.approx(
        4 * rtt + (1e6 - 14_000) / rate)


def test_a_newcomer_in_its_handshake_takes_nothing_then_ramps_up_to_its_share(spec):
    params = tcp.TcpParams(4096)  # the cluster's: a first window far below the rate
    a, b = pair_at(spec, 3)
    path = spec.paths(a, b)[0]
    net = FluidNetwork(spec, None, None, params)
    cap = min(net.links[h].capacity for h in path)
    first = net.add_flow(path, 5e9, 0.0)
    for t in (1.0, 2.0):  # long past the ramp
        net.pop_finished(t)
    assert first.rate == pytest.approx(cap)
    second = net.add_flow(path, 1e9, 2.0)
    assert second.rate == 0.0 and first.rate == pytest.approx(cap)  # handshake
    # after the handshake the newcomer's window binds: it gets less than a fair half
    net.pop_finished(second.ramp_at)
    assert 0 < second.rate < cap / 2
    assert first.rate == pytest.approx(cap - second.rate)
    while second.ramp_at is not None:  # doubling until the window stops binding
        before = second.rate
        net.pop_finished(second.ramp_at)
        assert second.rate >= before
    assert second.rate == pytest.approx(cap / 2)
    assert first.rate == pytest.approx(cap / 2)


def test_rtt_weighting_shares_a_link_in_inverse_proportion_to_rtt(spec):
    params = tcp.TcpParams(mss_bytes=1.0, init_cwnd=1e12)  # no ramp: shares alone
    net = FluidNetwork(spec, None, None, params, rtt_exponent=1.0)
    # a tier-1 and a tier-2 flow from one source share its host link, their bottleneck
    a, b1 = pair_at(spec, 1)
    b3 = next(n for n in (i.name for i in spec.instances) if spec.tier(a, n) == 2)
    p1, p3 = spec.paths(a, b1)[0], spec.paths(a, b3)[0]
    assert p1[0] == p3[0]
    f1 = net.add_flow(p1, 1e12, 0.0)
    f3 = net.add_flow(p3, 1e12, 0.0)
    net.pop_finished(max(f1.ramp_at, f3.ramp_at))
    assert f1.rate / f3.rate == pytest.approx(f3.rtt / f1.rtt, rel=1e-6)
    equal = FluidNetwork(spec, None, None, params)
    g1, g3 = equal.add_flow(p1, 1e12, 0.0), equal.add_flow(p3, 1e12, 0.0)
    equal.pop_finished(max(g1.ramp_at, g3.ramp_at))
    assert g1.rate == pytest.approx(g3.rate)


def test_seniority_gives_the_earlier_stream_twice_the_share_per_head_start(spec):
    """Streams on one path: equal when they start together; each seniority_s of head
    start doubles a stream's share against a later one; the rates sum to the link's (work
    conserving), and the weights' re-basing far into a run keeps the ratio."""
    a, b = pair_at(spec, 2)
    path = spec.paths(a, b)[0]

    def rates(h, starts):
        params = tcp.TcpParams(mss_bytes=1.0, init_cwnd=1e12, handshake_rtts=0.0,
                               seniority_s=h)
        net = FluidNetwork(spec, None, None, params)
        flows = []
        for t in starts:
            flows.append(net.add_flow(path, 1e15, t))
            net.pop_finished(t)
        return [f.rate for f in flows], min(net.links[hop].kv_capacity for hop in path)

    (r1, r2), cap = rates(0.5, [0.0, 0.0])
    assert r1 == pytest.approx(r2)
    (r1, r2), cap = rates(0.5, [0.0, 0.5])
    assert r1 / r2 == pytest.approx(2.0) and r1 + r2 == pytest.approx(cap)
    (r1, r2, r3), _ = rates(0.5, [0.0, 0.5, 1.0])
    assert r1 / r2 == pytest.approx(2.0) and r2 / r3 == pytest.approx(2.0)
    assert rates(0.0, [0.0, 1.0])[0][0] == pytest.approx(rates(0.0, [0.0, 1.0])[0][1])
    # 500 doublings apart: the weights are re-based on the way (a moved epoch), the
    # ratio is kept and stays finite
    (r1, r2), cap = rates(0.01, [0.0, 5.0])
    assert r1 == pytest.approx(cap) and r2 / r1 == pytest.approx(2.0 ** -500)
    # the senior stream held to a rate cap: the two juniors split what it leaves (its
    # weight leaves the link's sum of weights without cancelling theirs to zero)
    params = tcp.TcpParams(mss_bytes=1.0, init_cwnd=1e12, handshake_rtts=0.0,
                           seniority_s=0.01)
    net = FluidNetwork(spec, None, None, params)
    old = net.add_flow(path, 1e15, 0.0)
    old.cap = 0.25 * cap
    juniors = [net.add_flow(path, 1e15, 5.0, share=False) for _ in range(2)]
    net.recompute(path)
    net.pop_finished(5.0)
    assert old.rate == pytest.approx(0.25 * cap)
    assert [j.rate for j in juniors] == pytest.approx([0.375 * cap] * 2)
    assert tcp.seniority(1e9, 1e-3) == tcp.seniority(1e12, 1e-3) < math.inf


def test_a_newcomer_on_a_busy_path_waits_out_its_join_stall_and_the_incumbent_keeps_the_link(
        spec):
    """join_stall_s: a stream joining a path others keep saturated sends nothing for the
    stall after its handshake, then ramps up as any; one started together with the others,
    one whose bytes fit in its first window, one on an idle path and any with the term off
    start at once."""
    a, b = pair_at(spec, 2)
    path = spec.paths(a, b)[0]
    first_window = 10 * 1000.0

    def newcomer(stall, size, incumbent_at=0.0, joins_at=1.0):
        params = tcp.TcpParams(mss_bytes=1000.0, init_cwnd=10, handshake_rtts=1.0,
                               join_stall_s=stall)
        net = FluidNetwork(spec, None, None, params)
        old = net.add_flow(path, 1e15, incumbent_at) if incumbent_at is not None else None
        net.pop_finished(joins_at)
        new = net.add_flow(path, size, joins_at)
        handshake = joins_at + new.rtt
        return net, old, new, handshake

    net, old, new, handshake = newcomer(0.3, 1e9)
    assert new.ramp_at == pytest.approx(handshake + 0.3)
    net.pop_finished(handshake + 0.2)  # still silent: the incumbent keeps the whole link
    cap = min(net.links[h].kv_capacity for h in path)
    assert new.rate == 0.0 and old.rate == pytest.approx(cap)
    net.pop_finished(new.ramp_at)  # then its slow start begins
    assert new.rate > 0.0 and old.rate == pytest.approx(cap - new.rate)
    assert newcomer(0.0, 1e9)[2].ramp_at == pytest.approx(newcomer(0.0, 1e9)[3])  # off
    for size in (first_window, first_window / 2):  # fits its first window: no stall
        _, _, new, handshake = newcomer(0.3, size)
        assert new.ramp_at == pytest.approx(handshake)
    _, _, new, handshake = newcomer(0.3, 1e9, incumbent_at=None)  # an idle path
    assert new.ramp_at == pytest.approx(handshake)
    _, _, new, handshake = newcomer(0.3, 1e9, incumbent_at=1.0)  # started together
    assert new.ramp_at == pytest.approx(handshake)
    with pytest.raises(ValueError, match="join_stall_s"):
        tcp.TcpParams(1000.0, join_stall_s=-1.0)


def test_the_validity_floor_is_where_the_excess_reaches_the_tolerance_and_falls_with_scale():
    rate = 25e9 / 8 / 4
    cluster = tcp.TcpParams(4096)
    out = {}
    for scale in (2e-4, 8e-4):
        replica = tcp.emulation_equivalent(scale, 2)
        rtt_r = tcp.path_rtt(15e-6, [12.5e9 / 8 * 8 * scale / scale] * 6, replica)
        rtt_c = tcp.path_rtt(15e-6, [12.5e9] * 6, cluster)
        floor = validity.tcp.validity_floor(rate, rtt_r, replica, rtt_c, cluster, 0.05)
        gap = (tcp.startup_excess(floor, rate, rtt_r, replica)
               - tcp.startup_excess(floor, rate, rtt_c, cluster))
        assert gap == pytest.approx(0.05, abs=1e-3)
        assert (tcp.startup_excess(floor / 2, rate, rtt_r, replica)
                - tcp.startup_excess(floor / 2, rate, rtt_c, cluster)) > 0.05
        out[scale] = floor
    assert out[8e-4] < out[2e-4] / 2.5  # about 1 / scale


def test_floors_per_tier_grow_with_path_length():
    sc = load_scenario(SCENARIO)
    by = validity.floors(sc)
    assert set(by) == {1, 2, 3}
    assert by[1]["rtt_replica_s"] < by[2]["rtt_replica_s"] < by[3]["rtt_replica_s"]
    assert all(f["rtt_cluster_s"] < 1e-4 for f in by.values())  # microseconds
    assert by[1]["transfer_floor_bytes"] < by[3]["transfer_floor_bytes"]
    small = [by[3]["transfer_floor_bytes"] / 4] * 10
    clear = validity.scale_to_clear(sc, small, [3] * 10)
    assert clear["reached"] >= 0.9
    lifted = validity.floors(sc.with_overrides({"emulation.scale": clear["scale"],
                                                 "emulation.time_dilation": clear["time_dilation"]}))
    assert lifted[3]["transfer_floor_bytes"] <= small[0]
    assert validity.scale_to_clear(sc, [by[3]["transfer_floor_bytes"] * 2] * 10, [3] * 10) is None


def test_fit_tcp_recovers_a_known_serialisation_share_and_hop_delay():
    def predict(share, d, tier, size):
        params = tcp.emulation_equivalent(2e-4, 2, d, serialisation=share)
        rtt = tcp.path_rtt(1e-6 * tier, [1e9 * tier] * (2 * tier), params)
        return tcp.lone_transfer_time(size, 2.5e8, rtt, params)

    samples = [(t, s, predict(0.35, 3e-4, t, s)) for t in (1, 2, 3)
               for s in (1e6, 1e7, 1e8, 1e9)]
    got = fit_tcp(samples, predict)
    assert got["serialisation"] == pytest.approx(0.35)
    assert got["hop_delay_s"] == pytest.approx(3e-4, rel=1e-2)
    assert got["median_abs_error"] < 1e-3


def test_scenario_tcp_terms_and_the_replica_equivalent():
    sc = load_scenario(SCENARIO)
    assert sc.tcp_params() is None  # fluid by default
    on = sc.with_overrides({"network.flow_model": "tcp", "network.tcp.replica": True})
    assert on.tcp_params().mss_bytes == pytest.approx(tcp.WIRE_FRAME / sc.emulation.scale)
    own = sc.with_overrides({"network.flow_model": "tcp"})
    assert own.tcp_params().mss_bytes == 4096
    with pytest.raises(ScenarioError, match="network.flow_model"):
        load_scenario(SCENARIO, {"network.flow_model": "packets"})
    with pytest.raises(ScenarioError, match="network.tcp.init_cwnd"):
        load_scenario(SCENARIO, {"network.tcp.init_cwnd": 0})
    with pytest.raises(ScenarioError, match="network.tcp.serialisation"):
        load_scenario(SCENARIO, {"network.tcp.serialisation": 1.5})
    with pytest.raises(ScenarioError, match="emulation.rto_min_ms"):
        load_scenario(SCENARIO, {"emulation.rto_min_ms": 0})
    assert load_scenario(SCENARIO, {"emulation.rto_min_ms": 5}).emulation.rto_min_ms == 5
    with pytest.raises(ScenarioError, match="emulation.queue_limit"):
        load_scenario(SCENARIO, {"emulation.queue_limit": "cells"})
    with pytest.raises(ScenarioError, match="emulation.frame_bytes"):
        load_scenario(SCENARIO, {"emulation.frame_bytes": 100})


def test_a_smaller_replica_frame_is_more_segments_of_fewer_modelled_bytes():
    full, small = tcp.emulation_equivalent(2e-4, 2), tcp.emulation_equivalent(2e-4, 2,
                                                                               frame_bytes=414)
    assert full.mss_bytes == tcp.WIRE_FRAME / 2e-4 and small.mss_bytes == 414 / 2e-4
    # the first window is ten segments' payload, counted in the frames that carry it
    assert small.init_cwnd * small.mss_bytes == pytest.approx(10 * 348 / 2e-4)
    assert full.init_cwnd * full.mss_bytes == pytest.approx(10 * 1448 / 2e-4)
    assert tcp.segments(1e9, 2e-4) == 139 and tcp.segments(1e9, 2e-4, 414) == 575
    with pytest.raises(ValueError, match="no room"):
        tcp.wire_mss(66)
    # the replica's round trip is mostly a frame's serialisation at every hop, so smaller
    # frames shorten it in modelled time and bring the validity floor down with it
    sc = load_scenario(SCENARIO)
    full_tiers, small_tiers = (validity.floors(sc.with_overrides({"emulation.frame_bytes": f}))
                               for f in (1514, 414))
    for tier in (1, 2, 3):
        assert small_tiers[tier]["rtt_replica_s"] < full_tiers[tier]["rtt_replica_s"] / 2
        assert small_tiers[tier]["transfer_floor_bytes"] < full_tiers[tier]["transfer_floor_bytes"]


def test_a_calibration_from_another_scale_or_dilation_is_refused():
    sc = load_scenario(SCENARIO)
    good = {"scale": sc.emulation.scale, "time_dilation": sc.emulation.time_dilation}
    check_calibration(good, sc)
    with pytest.raises(ValueError, match="time_dilation 4.0"):
        check_calibration({**good, "time_dilation": 4.0}, sc)
    with pytest.raises(ValueError, match="scale"):
        check_calibration({**good, "scale": 1e-3}, sc)
    with pytest.raises(ValueError, match="scale None"):
        check_calibration({"time_dilation": 2}, sc)


def test_whole_transfers_run_from_the_first_start_to_the_slowest_shard():
    rows = [dict(request="a", shard=k, src="i0", dst="i5", tier=3, bytes=10, start=s, end=e)
            for k, (s, e) in enumerate([(1.0, 2.0), (1.1, 3.5), (1.0, 2.2)])]
    rows.append(dict(request="b", shard=0, src="i0", dst="i5", tier=3, bytes=5, start=0,
                     end=""))
    (whole,) = model_errors.whole_transfers(rows)
    assert (whole["start"], whole["end"], whole["bytes"]) == (1.0, 3.5, 30.0)
    assert model_errors.shard_spread(rows) == [pytest.approx(2.4 / 1.0)]


def test_bootstrap_intervals_hold_the_point_and_narrow_with_more_data():
    rng = random.Random(3)
    small = [rng.gauss(0.1, 0.2) for _ in range(20)]
    large = [rng.gauss(0.1, 0.2) for _ in range(2000)]
    a = stats.error_intervals(small)["mean_error"]
    b = stats.error_intervals(large)["mean_error"]
    assert a["low"] <= a["point"] <= a["high"]
    assert b["high"] - b["low"] < (a["high"] - a["low"]) / 4
    assert b["low"] < 0.1 < b["high"]
    assert stats.error_intervals(small) == stats.error_intervals(small)  # seeded


def test_ttft_verdicts_agree_disagree_or_say_why_not():
    rng = random.Random(5)
    ref = [rng.uniform(1, 3) for _ in range(400)]
    close = [r * rng.uniform(0.99, 1.03) for r in ref]
    far = [r * 1.3 for r in ref]
    def verdict(iv):
        kind = decision.ttft_agreement(iv)
        return kind, words.ttft_sentence(iv, kind)

    assert verdict(stats.paired_mean_error(ref, close))[0] == "agree"
    kind, sentence = verdict(stats.paired_mean_error(ref, far))
    assert kind == decision.Verdict.DISAGREE and "+30.0%" in sentence
    kind, sentence = verdict(stats.paired_mean_error(ref[:5], close[:5]))
    assert kind == "inconclusive" and "n too small" in sentence
    noisy = [r * rng.uniform(0.7, 1.4) for r in ref[:40]]
    assert verdict(stats.paired_mean_error(ref[:40], noisy))[0] == "inconclusive"
    assert math.isnan(stats.paired_mean_error([], []).point)
    assert stats.seed_agreement([(["a", "b"], ["a", "b"]), (["a", "b"], ["b", "a"])]) == \
        {"seeds": 2, "same": 1, "share": 0.5}


def test_shard_shares_sum_to_an_equal_split_and_spread_linearly():
    for n in (1, 2, 4, 8):
        shares = [tcp.shard_share(k, n, 0.4) for k in range(n)]
        assert sum(shares) == pytest.approx(n)
        assert shares == sorted(shares, reverse=True)
    assert [tcp.shard_share(k, 4, 0.4) for k in (0, 3)] == pytest.approx([1.4, 0.6])


def _shard_rows(request, src, dst, path, size, n, start):
    return [dict(request=request, shard=k, src=src, dst=dst, tier=2, bytes=size / n,
                 start=start, path=path) for k in range(n)]


def test_a_lone_transfer_ends_when_equal_shares_would_its_fastest_shard_spread_sooner(spec):
    a, b = pair_at(spec, 2)
    path = path_text(spec.paths(a, b)[0])
    rows = _shard_rows("r", a, b, path, 4e9, 4, 0.0)
    no_start = dict(mss_bytes=1.0, init_cwnd=1e12, handshake_rtts=0, tail_rtts=0)
    equal = replay_transfers(spec, rows, tcp=tcp.TcpParams(**no_start))
    spread = replay_transfers(spec, rows, tcp=tcp.TcpParams(**no_start, shard_spread=0.5))
    assert max(r["end"] for r in spread) == pytest.approx(max(r["end"] for r in equal))
    (fast,) = [r["end"] for r in spread if r["shard"] == 0]
    assert max(r["end"] for r in spread) / fast == pytest.approx(1.5)
    assert model_errors.shard_spread(spread) == pytest.approx([1.5])
    assert model_errors.shard_spread(equal) == pytest.approx([1.0])


def test_under_contention_a_spread_transfer_ends_later_than_equal_shares_predict(spec):
    """Two transfers of 4 shards start together on one path: equal shares end both at
    2 S / C; with a spread, each transfer's fast shards leave early and its last shard
    competes with more of the other's streams, so the slower transfer ends later."""
    a, b = pair_at(spec, 2)
    path = path_text(spec.paths(a, b)[0])
    rows = _shard_rows("x", a, b, path, 2e9, 4, 0.0) + _shard_rows("y", a, b, path, 2e9, 4, 0.0)
    no_start = dict(mss_bytes=1.0, init_cwnd=1e12, handshake_rtts=0, tail_rtts=0)

    def ends(spread):
        out = replay_transfers(spec, rows, tcp=tcp.TcpParams(**no_start, shard_spread=spread))
        return {w["request"]: w["end"] for w in model_errors.whole_transfers(out)}

    equal, spread = ends(0.0), ends(0.5)
    assert equal["x"] == pytest.approx(equal["y"])
    # the link stays full, so the last transfer still ends at 2 S / C ...
    assert max(spread.values()) == pytest.approx(max(equal.values()))
    # ... and with identical twins both end together there too: the spread redistributes
    # only within a transfer until one transfer is behind; a later start breaks the tie
    late = rows[:4] + _shard_rows("y", a, b, path, 2e9, 4, 0.05)
    eq = model_errors.whole_transfers(replay_transfers(spec, late, tcp=tcp.TcpParams(**no_start)))
    sp = model_errors.whole_transfers(replay_transfers(
        spec, late, tcp=tcp.TcpParams(**no_start, shard_spread=0.5)))
    first = {w["request"]: w["end"] for w in eq}["x"]
    assert {w["request"]: w["end"] for w in sp}["x"] > first * (1 + 1e-3)


@pytest.mark.parametrize("grouped", [True, False])
def test_a_spread_transfers_last_stream_competes_as_one_stream(spec, grouped):
    """Transfer x (two streams, spread 0.5: weights 1.5 and 0.5) meets stranger y on one
    link. Once x's fast stream is done its slow one is all x has left: it shares the link
    with y as one TCP stream with another (equal halves), not at a third of y's weight as
    a fixed per-stream handicap would leave it (what a flow without its transfer gets)."""
    a, b = pair_at(spec, 2)
    path = spec.paths(a, b)[0]
    params = tcp.TcpParams(mss_bytes=1.0, init_cwnd=1e12, handshake_rtts=0, tail_rtts=0,
                           shard_spread=0.5)
    net = FluidNetwork(spec, None, None, params)
    group = "x" if grouped else None
    fast, slow = (net.add_flow(path, size, 0.0, shard=(k, 2), group=group)
                  for k, size in ((0, 1e9), (1, 1e12)))
    other = net.add_flow(path, 1e12, 0.0)
    net.pop_finished(0.0)  # the (instant) handshake ends
    cap = min(net.links[h].capacity for h in path)
    assert [fast.rate, slow.rate, other.rate] == pytest.approx([cap / 2, cap / 6, cap / 3])
    done = net.pop_finished(net.next_completion())
    assert done == [fast]
    want = [cap / 2, cap / 2] if grouped else [cap / 3, 2 * cap / 3]
    assert [slow.rate, other.rate] == pytest.approx(want)


def test_fit_shard_spread_fits_every_shards_end_after_the_fixed_cost():
    """Transfers whose shards end as the model's lone profile says (after a fixed cost)
    give that spread back; a transfer whose fastest shard alone is far off moves the
    per-transfer estimate less than the slowest / fastest ratio would (the ratio is kept
    for the report)."""
    from testbed.validate.judging.calibration import fit_shard_spread

    def ends(spread, n, total, fixed):
        return [fixed + total * x for x in tcp.lone_shard_ends(n, spread)]

    exact = [(ends(x, n, 0.2, 0.01), 0.01) for x, n in ((0.3, 4), (0.3, 4), (0.4, 2))]
    got = fit_shard_spread(exact + [([0.5], 0.0)])  # one shard: nothing to fit
    assert got["spread_estimates"] == pytest.approx([0.3, 0.3, 0.4])
    assert got["shard_spread"] == pytest.approx(0.3)
    assert got["ratios"] == pytest.approx([1.3, 1.3, 1.4])
    odd = ends(0.3, 4, 0.2, 0.01)
    odd[0] = 0.01 + 0.2 / 2.0  # its first shard twice as fast: the ratio says spread 1.0
    (est,) = fit_shard_spread([(odd, 0.01)])["spread_estimates"]
    assert 0.3 < est < 0.6
    assert fit_shard_spread([])["shard_spread"] == 0.0


def test_lone_shard_ends_are_what_the_network_gives_a_transfer_alone(spec):
    a, b = pair_at(spec, 2)
    path = path_text(spec.paths(a, b)[0])
    no_start = dict(mss_bytes=1.0, init_cwnd=1e12, handshake_rtts=0, tail_rtts=0)
    for n, spread in ((4, 0.5), (3, 0.2), (8, 0.7)):
        rows = _shard_rows("r", a, b, path, 4e9, n, 0.0)
        out = replay_transfers(spec, rows, tcp=tcp.TcpParams(**no_start, shard_spread=spread))
        ends = sorted(r["end"] for r in out)
        assert [e / ends[-1] for e in ends] == pytest.approx(tcp.lone_shard_ends(n, spread))
        assert ends[-1] / ends[0] == pytest.approx(1 + spread)


