"""What DCQCN's cuts cost a transfer against a fluid share, and the RoCE replica's
validity floor derived from it (testbed/model/dcqcn.py, validate/judging/validity.py)."""

from __future__ import annotations

import pytest

from testbed.model import dcqcn
from testbed.scenario import load_scenario
from testbed.validate.judging import validity
from tests.conftest import ROOT


def test_a_cut_costs_one_increase_period_of_sending_at_full_alpha():
    # the reaction point's own rule, stepped: the rate goes halfway to the target each
    # event; what it sends less than the rate it was cut from, in seconds of that rate
    line, period = 1.0, 1e-3
    for alpha in (1.0, 0.5):
        rc, lost = line * (1 - alpha / 2), 0.0
        for _ in range(60):
            lost += (line - rc) * period
            rc = (line + rc) / 2
        assert lost / line == pytest.approx(dcqcn.cut_cost_s(period, alpha), rel=1e-9)


def test_the_increase_period_is_the_timer_or_the_byte_counter_whichever_comes_first():
    assert dcqcn.increase_period_s(55e-6, 10e6, 12.5e9) == 55e-6  # 100 Gbit/s: the timer
    assert dcqcn.increase_period_s(55e-6, 10e3, 12.5e9) == pytest.approx(0.8e-6)


def floors(**over):
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"emulation.time_dilation": 1, **over})
    return {t: f["transfer_floor_bytes"] for t, f in validity.floors(sc).items()}


def test_roce_s_floor_is_the_replica_s_slower_recovery_and_falls_with_the_scale():
    fine, coarse = (floors(**{"ns3.transport": "roce", "emulation.scale": s})
                    for s in (1e-1, 1e-2))
    for tier in coarse:  # (1/s - 1) rate-timer periods of a shard's share, / tolerance
        assert fine[tier] / coarse[tier] == pytest.approx((10 - 1) / (100 - 1))
    # the tiny-burst row's transfers (~0.2 GB) are below it at 1e-2 on every tier, and
    # the scale that clears them is a rung up
    sc = load_scenario(ROOT / "scenarios" / "validate-tiny-burst.yaml",
                       {"ns3.transport": "roce", "emulation.scale": 1e-2,
                        "emulation.time_dilation": 1})
    assert validity.share_above([0.2e9] * 3, [1, 2, 3], validity.floors(sc)) == 0
    clear = validity.scale_to_clear(sc, [0.2e9] * 3, [1, 2, 3])
    assert 1e-2 < clear["scale"] <= 0.16
    # with the real timers beside the replica's rates, its recovery is the cluster's
    assert set(floors(**{"ns3.transport": "roce", "emulation.scale": 1e-2,
                         "ns3.roce.timers": "absolute"}).values()) == {0.0}
    assert floors(**{"emulation.scale": 1e-2}) != coarse  # TCP's start-up floor
