"""The paper's claims judged on both engines: pairing, block bootstrap, verdicts,
ranking probability, and the sequential plan's arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.validate.judging import claims, decision, sequential, stats, targets


def rows(ttfts, slo=5.0, measured=True, arrivals=None):
    return [{"id": f"r{i}", "arrival": arrivals[i] if arrivals else float(i),
             "measured": measured, "state": "completed", "ttft": t,
             "slo_met": t <= slo} for i, t in enumerate(ttfts)]


def runs_of(base, factors: dict, seed=1, engines=claims.ENGINES):
    """base TTFTs per request; factors[(engine, sched)] scales them."""
    return {(e, s, seed): rows([t * factors[(e, s)] for t in base])
            for e in engines for s in {k[1] for k in factors}}


def test_pairing_keeps_the_requests_every_run_measured_in_arrival_order():
    runs = runs_of([1.0, 2.0, 3.0], {(e, s): 1.0 for e in claims.ENGINES for s in ("rr", "cla")})
    runs[("flow", "cla", 1)][1]["measured"] = False  # r1 left out of one run only
    runs[("packets", "rr", 1)][2]["state"] = "failed"  # served nowhere: NaN, kept for SLO
    runs[("packets", "rr", 1)][2]["ttft"] = None
    runs[("packets", "rr", 1)][0]["arrival"] = 9.0  # arrival order from the first run
    p = claims.pair_requests(runs)
    assert p.schedulers == ("cla", "rr")
    assert p.ids == ("r0", "r2")  # r1 dropped; cla's packet run orders them
    assert math.isnan(p.ttft[1, 0, 1]) and p.ttft.shape == (2, 2, 2)
    # a seed some run lacks pairs nothing
    more = {**runs, ("packets", "rr", 2): rows([1.0])}
    assert claims.pair_requests(more).n == 2


def test_block_weights_keep_each_seeds_size_and_draw_whole_blocks():
    seeds = np.array([1] * 27 + [2] * 8)
    w = stats.block_weights(seeds, resamples=200)
    assert w.shape == (200, 35)
    assert np.all(w[:, :27].sum(axis=1) == 27) and np.all(w[:, 27:].sum(axis=1) == 8)
    size = stats.block_length(27)
    assert size == 3
    for start in range(0, 27, size):  # a block is drawn whole: equal counts inside it
        assert np.all(w[:, start:start + size] == w[:, start:start + 1])
    assert len(np.unique(w[:, 0])) > 1  # and it is a real resample


def test_block_weights_draw_one_requests_rows_together_across_its_runs():
    seeds = np.array([1] * 27 + [2] * 8)
    ids = [f"r{i}" for i in range(27)] + [f"q{i}" for i in range(8)]
    # each row its own request: the very weights of blocks within seeds
    assert np.array_equal(stats.block_weights(seeds, 200, keys=ids),
                          stats.block_weights(seeds, 200))
    # a second draw of seed 1's requests (seed 3, one group with it): its rows weigh
    # as the same requests' rows of seed 1 in every resample
    groups = np.array([1] * 27 + [2] * 8 + [1] * 27)
    w = stats.block_weights(groups, 200, keys=ids + ids[:27])
    assert np.array_equal(w[:, 35:], w[:, :27])
    assert np.all(w[:, :27].sum(axis=1) == 27)


def test_draws_of_one_workload_are_one_sample_of_its_requests():
    base = _spread_base()
    rng = np.random.default_rng(5)
    f = {("packets", "rr"): 1.0, ("packets", "netkv-full"): 0.8,
         ("flow", "rr"): 1.0, ("flow", "netkv-full"): 0.85}
    one = runs_of(base, f)
    for key in one:  # noise per request and run: what a second draw changes
        for row in one[key]:
            row["ttft"] *= float(rng.lognormal(0.0, 0.3))
    twice = {**one, **{(e, s, 2): rows_ for (e, s, _), rows_ in one.items()}}

    def diff(runs, group_of=None):
        pc = claims.judge_point(claims.pair_requests(runs, group_of))
        return next(c for c in pc.claims if c.metric == "ttft_mean").difference

    alone = diff(one)
    # the same requests counted again as if a new seed: the interval narrows, wrongly
    assert diff(twice).half_width < 0.8 * alone.half_width
    # as draws of one workload they are one sample: the same interval as the run alone
    grouped = diff(twice, {1: 1, 2: 1})
    assert grouped.point == pytest.approx(alone.point)
    assert grouped.half_width == pytest.approx(alone.half_width)


def test_weighted_quantile_with_unit_weights_is_the_inverted_cdf():
    x = np.array([5.0, 1.0, 3.0, 2.0, 4.0, np.nan])
    got = stats.weighted_quantile(np.ones((1, 6)), x, 0.5)[0]
    assert got == np.quantile(x[:5], 0.5, method="inverted_cdf")
    assert stats.weighted_quantile(np.array([[0, 0, 0, 0, 5, 0.0]]), x, 0.99)[0] == 4.0


def _spread_base(n=200, seed=3):
    # requests differ ten-fold (prompt lengths, bursts): an unpaired comparison drowns
    return list(np.random.default_rng(seed).lognormal(0.0, 1.0, n))


def test_a_gain_the_engines_share_agrees_and_pairing_makes_it_tight():
    base = _spread_base()
    f = {("packets", "rr"): 1.0, ("packets", "netkv-full"): 0.8,
         ("flow", "rr"): 1.1, ("flow", "netkv-full"): 0.88}  # both -20%, flow 10% slower
    pc = claims.judge_point(claims.pair_requests(runs_of(base, f)))
    (c,) = [c for c in pc.claims if c.metric == "ttft_mean"]
    assert (c.scheduler, c.baseline) == ("netkv-full", "rr")
    assert c.packets.point == pytest.approx(-0.2) and c.flow.point == pytest.approx(-0.2)
    assert c.on_packets == "holds" and c.verdict == "agree"
    assert c.difference.half_width < 1e-9  # same ratio on every request: no spread at all
    # the absolute TTFT of one scheduler is not tight: requests vary ten-fold
    rr = pc.values["ttft_mean"]["packets"]["rr"]
    assert (rr.high - rr.low) / rr.point > 0.1
    assert "agree" in c.sentence and "NetKV-Full vs RR, mean TTFT" in c.sentence


def test_a_flow_model_that_doubles_the_gain_disagrees():
    base = _spread_base()
    rng = np.random.default_rng(4)
    noise = rng.normal(1.0, 0.05, len(base))
    runs = {("packets", "rr", 1): rows(base), ("flow", "rr", 1): rows(base),
            ("packets", "netkv-full", 1): rows(list(np.array(base) * 0.9 * noise)),
            ("flow", "netkv-full", 1): rows(list(np.array(base) * 0.7 * noise))}
    (c,) = [c for c in claims.judge_point(claims.pair_requests(runs)).claims
            if c.metric == "ttft_mean"]
    assert c.difference.point == pytest.approx(-0.2, abs=0.02)
    assert c.difference.high < -targets.GAIN_TOLERANCE and c.verdict == "disagree"


def test_a_difference_within_two_draws_spread_is_no_disagreement():
    """The same -20-point difference, judged with one run's draw-to-draw sd of the gain:
    small beside it (2 points) the verdict stands; as large as the demo's (8 points) the
    difference could be one draw against another, and with more seeds it narrows again."""
    base = _spread_base()
    noise = np.random.default_rng(4).normal(1.0, 0.05, len(base))
    runs = {("packets", "rr", 1): rows(base), ("flow", "rr", 1): rows(base),
            ("packets", "netkv-full", 1): rows(list(np.array(base) * 0.9 * noise)),
            ("flow", "netkv-full", 1): rows(list(np.array(base) * 0.7 * noise))}
    p = claims.pair_requests(runs)

    def judged(sd):
        (c,) = [c for c in claims.judge_point(
            p, spreads={"netkv-full vs rr": claims.DrawSpread(sd)}).claims
                if c.metric == "ttft_mean"]
        return c

    small, large = judged(0.02), judged(0.08)
    assert small.verdict == "disagree" and large.verdict == "inconclusive"
    assert large.difference.high < -targets.GAIN_TOLERANCE  # the requests alone would say so
    z = 1.959964
    assert large.draws.high - large.draws.point == pytest.approx(
        math.hypot(large.difference.high - large.difference.point, z * 0.08 * math.sqrt(2)))
    assert "with the draws" in large.sentence
    assert "difference_with_draws" in large.as_dict()
    # the P99 and SLO claims have no draw spread measured: judged on requests alone
    assert all(c.draws is None for c in claims.judge_point(
        p, spreads={"netkv-full vs rr": claims.DrawSpread(0.08)}).claims
        if c.metric != "ttft_mean")
    wide = claims.with_draws(large.difference, claims.DrawSpread(0.08), seeds=[1])
    assert claims.with_draws(large.difference, claims.DrawSpread(0.08),
                             seeds=range(8)).half_width < wide.half_width


def test_the_flow_models_mean_over_its_draws_narrows_and_moves_the_difference():
    """Six flow draws a seed: its mean's spread is a sixth of one draw's variance, so the
    widening is sd sqrt(1 + 1/6) against sd sqrt(2) for one draw a side; the point moves
    by how far the draws' mean lies from the seed's own draw (the run paired)."""
    diff = stats.Interval(-0.10, -0.14, -0.06, se=0.02)
    one = claims.with_draws(diff, claims.DrawSpread(0.08), seeds=[1, 2])
    six = claims.with_draws(diff, claims.DrawSpread(0.08, 6, {1: 0.03, 2: 0.05}),
                            seeds=[1, 1, 2])
    z = 1.959964
    assert one.point == diff.point and six.point == pytest.approx(-0.06)
    assert six.high - six.point == pytest.approx(math.hypot(0.04, z * 0.08 * math.sqrt(7 / 12)))
    assert one.high - one.point == pytest.approx(math.hypot(0.04, z * 0.08))
    assert claims.draws_variance(0.08, 2, 6) == pytest.approx(0.08 ** 2 * 7 / 12)


def test_few_noisy_requests_are_inconclusive_and_a_reversal_is_named():
    rng = np.random.default_rng(5)
    base = list(rng.lognormal(0.0, 1.0, 12))
    runs = {(e, s, 1): rows(list(np.array(base) * rng.lognormal(0.0, 0.5, 12)))
            for e in claims.ENGINES for s in ("rr", "cla")}
    (c,) = [c for c in claims.judge_point(claims.pair_requests(runs)).claims
            if c.metric == "ttft_mean"]
    assert c.verdict == "inconclusive"
    worse = stats.Interval(0.3, 0.1, 0.5, se=0.1)
    assert decision.on_packets(worse, higher_is_better=False) == "reversed"
    assert decision.on_packets(worse, higher_is_better=True) == "holds"


def test_every_baseline_pair_is_claimed_once_on_every_metric():
    base = _spread_base(60)
    f = {(e, s): k for e in claims.ENGINES
         for s, k in (("rr", 1.0), ("cla", 0.9), ("netkv-full", 0.8))}
    pc = claims.judge_point(claims.pair_requests(runs_of(base, f)))
    pairs = {(c.scheduler, c.baseline) for c in pc.claims}
    assert pairs == {("cla", "rr"), ("netkv-full", "rr"), ("netkv-full", "cla")}
    assert len(pc.claims) == 3 * len(claims.METRICS)
    slo = [c for c in pc.claims if c.metric == "slo"]
    assert all(c.packets.point >= 0 for c in slo)  # faster never misses more SLOs here
    r = pc.ranking
    assert r["packets"] == r["flow"] == ["netkv-full", "cla", "rr"]
    assert r["p_packets_order"] == r["p_same_order"] == 1.0
    doc = pc.as_dict()
    assert doc["n"] == 60 and doc["values"]["ttft_mean"]["flow"]["rr"]["point"] > 0


def test_ranking_probability_falls_when_two_schedulers_tie():
    rng = np.random.default_rng(6)
    base = _spread_base(80)
    runs = {(e, s, 1): rows(list(np.array(base) * rng.lognormal(0.0, 0.3, 80)))
            for e in claims.ENGINES for s in ("rr", "cla")}
    r = claims.judge_point(claims.pair_requests(runs)).ranking
    assert 0.0 < r["p_packets_order"] < 1.0 and 0.0 < r["p_same_order"] < 1.0


def test_normal_intervals_at_a_look_level_widen_with_the_level():
    draws = np.random.default_rng(7).normal(0.0, 1.0, 4000)
    e95 = stats.estimate(0.0, draws, 0.95, normal=True)
    e999 = stats.estimate(0.0, draws, 0.999, normal=True)
    assert e95.half_width == pytest.approx(1.96 * e95.se, rel=1e-3)
    assert e999.half_width > 1.6 * e95.half_width


def test_alpha_spending_spends_exactly_alpha_over_the_looks():
    for planned in (1, 2, 3, 5):
        spent = sum(1 - sequential.look_level(k, planned) for k in range(1, planned + 1))
        assert spent == pytest.approx(sequential.ALPHA)
    levels = [sequential.look_level(k, 4) for k in range(1, 5)]
    assert levels == sorted(levels, reverse=True)  # early looks demand more
    assert sequential.look_level(1, 1) == pytest.approx(0.95)
    with pytest.raises(ValueError):
        sequential.look_level(3, 2)


def _round_wall(window):  # 3 schedulers, 5 s start/stop, dilation 2, 13 s warm-up + drain
    return 3 * (5 + 2 * (13 + window))


def test_the_plan_reaches_the_target_in_the_fewest_rounds_that_fit():
    p = sequential.plan(12, 0.05, 0.05, 3600, _round_wall, 30, 10, 120)
    assert p.limited_by == "target" and p.rounds == 2
    assert p.rounds * p.window_s >= p.needed_window_s
    # se halves -> a quarter of the measurement
    q = sequential.plan(12, 0.025, 0.05, 3600, _round_wall, 30, 10, 120)
    assert q.needed_window_s == pytest.approx(p.needed_window_s / 4)
    assert p.expected_wall_s == pytest.approx(30 + 2 * _round_wall(p.window_s))
    # a window over the maximum takes more rounds
    wide = sequential.plan(12, 0.1, 0.05, 1e9, _round_wall, 30, 10, 120)
    assert wide.limited_by == "target" and 2 < wide.rounds <= 8 and wide.window_s <= 120
    # beyond what the rounds can hold: all of them, at the longest window
    most = sequential.plan(12, 0.5, 0.05, 1e9, _round_wall, 30, 10, 120, max_rounds=6)
    assert (most.limited_by, most.rounds, most.window_s) == ("rounds", 6, 120)


def test_a_budget_too_small_for_the_target_buys_what_it_can():
    p = sequential.plan(12, 0.2, 0.02, 600, _round_wall, 30, 10, 120)
    assert p.limited_by == "budget" and p.expected_wall_s <= 600 + 1e-6
    assert p.expected_wall_s > 600 - 3 * 2 * 1.0  # the window is as long as fits
    assert p.rounds == 1  # every round costs a warm-up and a drain: one long one buys most
    tiny = sequential.plan(12, 0.2, 0.02, 100, _round_wall, 30, 10, 120)
    assert tiny.rounds == 1 and tiny.window_s == 10


def test_draws_set_a_floor_only_more_runs_lower():
    # one run's gain moving 8 points across draws, the flow model's gain the mean of six:
    # 5 points at 95% needs (1 + 1/6) (1.96 x 8 / 5)^2 = 11.5, so 12 runs at least
    assert sequential.seeds_for_draws(0.08, 0.05, 0.95) == 12
    assert sequential.needed_window(12, 0.05, 0.05, 0.95, draw_sd=0.08, seeds=11) == math.inf
    some = sequential.needed_window(12, 0.05, 0.05, 0.95, draw_sd=0.08, seeds=40)
    none = sequential.needed_window(12, 0.05, 0.05, 0.95)
    assert none < some < math.inf  # the draws take part of the width: more requests


def test_a_target_the_draws_put_out_of_reach_is_said_and_the_budget_buys_measurement():
    flat = sequential.plan(12, 0.2, 0.02, 600, _round_wall, 30, 10, 120)
    drawn = sequential.plan(12, 0.2, 0.02, 600, _round_wall, 30, 10, 120, draw_sd=0.1)
    assert (drawn.rounds, drawn.window_s) == (flat.rounds, flat.window_s)
    assert drawn.limited_by == "budget" and drawn.expected_wall_s <= 600 + 1e-6
    assert drawn.as_dict()["needed_window_s"] is None  # no window reaches 2 points
    assert drawn.as_dict()["seeds_for_draws"] == sequential.seeds_for_draws(0.1, 0.02, 0.95)
    assert "out of reach" in sequential.need_words(drawn.as_dict())
    assert "needs ~" in sequential.need_words(flat.as_dict())
    # reachable, but only with enough seeds: the draws set the rounds
    few = sequential.plan(12, 0.02, 0.2, 1e9, _round_wall, 30, 10, 120)
    many = sequential.plan(12, 0.02, 0.2, 1e9, _round_wall, 30, 10, 120, draw_sd=0.15)
    assert few.rounds == 2 and many.rounds > few.rounds and many.limited_by == "target"


def test_stop_reasons():
    stop = sequential.stop_reason
    assert stop(True, False, 1, 3, 10, 100, 1000).startswith("conclusive")
    assert stop(False, True, 1, 3, 10, 100, 1000).startswith("target width")
    assert stop(False, False, 3, 3, 10, 100, 1000) == "planned rounds done"
    assert stop(False, False, 1, 3, 950, 100, 1000).startswith("budget")
    assert stop(False, False, 1, 3, 10, 100, 1000) is None


def test_the_replay_moves_each_ttft_by_its_own_transfer_error_and_rejudges_the_slo():
    reqs = [{"id": "a", "arrival": 0.0, "measured": True, "state": "completed", "ttft": 4.0,
             "slo_s": 5.0, "slo_met": True},
            {"id": "b", "arrival": 1.0, "measured": True, "state": "completed", "ttft": 2.0,
             "slo_s": 5.0, "slo_met": True},
            {"id": "c", "arrival": 2.0, "measured": True, "state": "failed", "ttft": "",
             "slo_s": 5.0, "slo_met": False}]
    packets = [{"request": "a", "end": 3.0}, {"request": "a", "end": 3.5},
               {"request": "c", "end": 1.0}]
    replay = [{"request": "a", "end": 5.0}, {"request": "a", "end": 4.0},
              {"request": "c", "end": 0.5}]
    got = {r["id"]: r for r in claims.replayed_requests(reqs, packets, replay)}
    assert got["a"]["ttft"] == pytest.approx(4.0 + 5.0 - 3.5)  # last shard against last
    assert got["a"]["slo_met"] is False  # 5.5 s misses the 5 s SLO the packets met
    assert got["b"] == reqs[1]  # no transfer (a local hit): as the packets served it
    assert got["c"] == reqs[2]  # not served: nothing to move


def test_the_replay_verdict_sees_past_diverging_decisions():
    """The flow model's own decisions differ request by request (an inconclusive claim);
    the replay of the packets' transfers errs by 1% per request: its verdict agrees."""
    base = _spread_base(n=150, seed=6)
    rng = np.random.default_rng(7)
    gain = np.array(base) * 0.8
    pk = gain * rng.lognormal(0.0, 0.4, len(base))  # the packets' own decisions
    fl = gain * rng.lognormal(0.0, 0.4, len(base))  # the flow model's, independently
    runs = {("packets", "rr", 1): rows(base), ("flow", "rr", 1): rows(base),
            ("replay", "rr", 1): rows(list(np.array(base) * 1.01)),
            ("packets", "netkv-full", 1): rows(list(pk)),
            ("flow", "netkv-full", 1): rows(list(fl)),
            ("replay", "netkv-full", 1): rows(list(pk * rng.normal(1.01, 0.01, len(base))))}
    p = claims.pair_requests(runs)
    assert p.engines == ("packets", "flow", "replay") and p.ttft.shape == (150, 3, 2)
    pc = claims.judge_point(p)
    (c,) = [c for c in pc.claims if c.metric == "ttft_mean"]
    assert c.verdict == "inconclusive"
    assert c.network_verdict == "agree" and abs(c.network.point) < 0.01
    assert c.network.half_width < c.difference.half_width / 3
    assert "replay - packets" in c.sentence and c.as_dict()["network_verdict"] == "agree"
    assert set(pc.values["ttft_mean"]) == {"packets", "flow", "replay"}
    assert set(pc.ranking["packets"]) == {"rr", "netkv-full"}  # the engines' ranking only
    # without the replay nothing of it is claimed
    bare = claims.judge_point(claims.pair_requests(
        {k: v for k, v in runs.items() if k[0] != "replay"}))
    assert all(c.network is None and "network" not in c.as_dict() for c in bare.claims)


def test_a_look_that_spends_next_to_no_alpha_gets_a_finite_wide_interval():
    level = 1.0 - (sequential.obrien_fleming_spent(8 / 156) - 0.0)
    assert level == 1.0  # the alpha spent underflows
    assert 6.5 < stats.z(level) < 7.5 and stats.z(0.95) == pytest.approx(1.959964)
