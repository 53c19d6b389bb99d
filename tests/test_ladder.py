"""The scale ladder's judging: a claim's change between two rungs, judged as an interval."""

import math

import pytest

from testbed.validate.judging.decision import Verdict
from testbed.validate.judging.ladder import (
    change,
    finest_two,
    interval,
    ladder_steps,
    with_packet_draws,
)
from testbed.validate.judging.stats import Interval


def iv(point, half, se=None):
    return Interval(point, point - half, point + half, se=se)


def test_change_adds_independent_errors_in_quadrature():
    moved = change(iv(-0.16, 0.02, se=0.01), iv(-0.18, 0.04, se=0.02))
    assert moved.point == pytest.approx(-0.02)
    assert moved.se == pytest.approx(math.hypot(0.01, 0.02))
    assert moved.half_width == pytest.approx(1.959964 * math.hypot(0.01, 0.02), rel=1e-5)


def test_change_takes_the_half_width_where_no_se_was_recorded():
    moved = change(iv(0.0, 0.0196), iv(0.0, 0.0196))
    assert moved.se == pytest.approx(math.hypot(0.01, 0.01), rel=1e-3)


def test_close_narrow_rungs_agree_and_wide_ones_do_not():
    narrow = ladder_steps({2e-4: {"a vs b": {"packets gain": iv(-0.16, 0.01, se=0.005)}},
                           1e-3: {"a vs b": {"packets gain": iv(-0.17, 0.01, se=0.005)}}})
    assert [s.verdict for s in narrow] == [Verdict.AGREE]
    wide = ladder_steps({2e-4: {"a vs b": {"packets gain": iv(-0.16, 0.1, se=0.05)}},
                         1e-3: {"a vs b": {"packets gain": iv(-0.16, 0.1, se=0.05)}}})
    assert [s.verdict for s in wide] == [Verdict.INCONCLUSIVE]  # same points, no verdict
    far = ladder_steps({2e-4: {"a vs b": {"packets gain": iv(-0.05, 0.01, se=0.005)}},
                        1e-3: {"a vs b": {"packets gain": iv(-0.20, 0.01, se=0.005)}}})
    assert [s.verdict for s in far] == [Verdict.DISAGREE]


def test_only_the_two_finest_rungs_are_compared():
    assert finest_two([1e-2, 2e-4, 1e-3]) == (1e-3, 1e-2)
    assert finest_two([2e-4]) is None
    rungs = {s: {"c": {"flow - packets": iv(x, 0.01, se=0.005)}}
             for s, x in ((2e-4, 0.3), (1e-3, 0.0), (1e-2, 0.01))}
    (step,) = ladder_steps(rungs)
    assert (step.coarse, step.fine) == (1e-3, 1e-2)
    assert step.change.point == pytest.approx(0.01)
    assert step.as_dict()["verdict"] == "agree"


def test_a_claim_one_rung_lacks_is_not_judged():
    rungs = {2e-4: {"c": {"packets gain": iv(0, 0.01)}, "d": {"packets gain": iv(0, 0.01)}},
             1e-3: {"c": {"packets gain": iv(0, 0.01)}}}
    assert [s.claim for s in ladder_steps(rungs)] == ["c"]


def test_packet_draws_widen_the_gain_by_their_spread_over_the_seeds():
    gain = iv(-0.15, 0.0196, se=0.01)
    wider = with_packet_draws(gain, draw_sd=0.1, seeds=100)
    assert wider.point == gain.point
    assert wider.se == pytest.approx(math.hypot(0.01, 0.01))
    assert wider.half_width == pytest.approx(math.hypot(0.0196, 1.959964 * 0.01), rel=1e-4)
    assert with_packet_draws(gain, draw_sd=0.1, seeds=10000).half_width < wider.half_width


def test_interval_reads_its_record():
    got = interval({"point": 0.1, "low": 0.0, "high": 0.2, "se": 0.05})
    assert (got.point, got.low, got.high, got.se) == (0.1, 0.0, 0.2, 0.05)


def test_a_plans_wall_time_spreads_its_seeds_runs_over_the_cores_it_can_fill():
    from testbed.validate.engines.ns3_cost import FirstRound

    one = FirstRound(seeds=1, runs=3, packets_per_seed=1e6, rate=1e5, source="t", workers=1,
                     judging_s=2.0)
    assert one.seed_cpu_s == pytest.approx(10.0 + 3 * 2.0)
    assert one.plan_wall_s(10, 1) == pytest.approx(160.0)
    assert one.plan_wall_s(10, 16) == pytest.approx(10.0)  # 30 runs fill 16 cores
    assert one.plan_wall_s(1, 16) == pytest.approx(16.0 / 3)  # 3 runs fill only 3
