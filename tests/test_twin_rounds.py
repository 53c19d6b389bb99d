"""The emulation's seeds for ns-3 against it, planned from the first (validate/pipelines/twin_rounds.py):
how many would settle the claims, and the words the answer gives."""

from __future__ import annotations

import pytest

from testbed.validate.pipelines.twin_rounds import plan_words, seeds_to_settle, settle_words


def claim(low: float, high: float, verdict: str = "inconclusive") -> dict:
    return {"scheduler": "cla", "baseline": "rr", "verdict": verdict,
            "difference": {"point": (low + high) / 2, "low": low, "high": high}}


def test_the_widest_inconclusive_claim_sets_the_seeds_and_conclusive_ones_need_none():
    # centred at +2 points, +-6 wide on one seed: 3 points of room to the band's edge,
    # a half-width of 6 narrows as 1/sqrt(seeds): (6 / 3)^2 = 4 seeds
    assert seeds_to_settle([claim(-0.04, 0.08)], 1) == 4
    assert seeds_to_settle([claim(-0.04, 0.08), claim(-0.01, 0.01, "agree")], 1) == 4
    assert seeds_to_settle([claim(-0.01, 0.01, "agree")], 3) == 3
    # on the band's edge no number of seeds is expected to settle it
    assert seeds_to_settle([claim(0.0, 0.10)], 1) is None


def test_the_answer_says_what_more_seeds_would_cost_and_nothing_when_settled():
    words = settle_words([claim(-0.04, 0.08)], 1, 180.0)
    assert words == ("To settle ns-3 vs emulation: about 3 more emulation seeds, ~9 min here "
                     "(--emulation-budget).")
    assert settle_words([claim(-0.01, 0.01, "agree")], 1, 180.0) is None
    assert "no number" in settle_words([claim(0.0, 0.10)], 1, 180.0)
    line = plan_words(4, 180.0, 4, 1800.0)
    assert "about 4 seed(s)" in line and "12 min" in line and "budget 30 min" in line


@pytest.mark.parametrize("seeds", [1, 2, 5])
def test_more_seeds_in_never_ask_for_fewer_than_are_in(seeds):
    assert seeds_to_settle([claim(-0.04, 0.08)], seeds) >= seeds


def test_on_both_engines_the_budget_is_the_whole_validations():
    """ns-3's rounds get what the emulation's part left of --budget (30 min by default),
    never less than ten minutes: a 60-minute budget after 42 minutes of emulation is 18
    minutes of ns-3, not another 60."""
    from testbed.api import NS3_LEAST_S, ns3_share_s

    assert ns3_share_s(None, 300.0) == 1500.0
    assert ns3_share_s(3600.0, 2520.0) == 1080.0
    assert ns3_share_s(3600.0, 3500.0) == NS3_LEAST_S
