"""End to end on the shipped trace: the paper's headline, qualitatively (section VI-C, VI-K)."""

import pytest

from testbed.runner import run_flowsim
from testbed.scenario import load_scenario
from tests.conftest import ROOT

DEFAULT = str(ROOT / "scenarios" / "default.yaml")


@pytest.mark.slow
def test_rag_at_full_load_netkv_beats_cla_and_rr_and_shifts_tiers(tmp_path):
    sc = load_scenario(DEFAULT, {"seeds": 3})
    rows = {r.scheduler: r.stats for r in run_flowsim(sc, tmp_path).rows}
    full, cla, rr = rows["netkv-full"], rows["cla"], rows["rr"]
    assert full["ttft_mean_ms"] < cla["ttft_mean_ms"] < rr["ttft_mean_ms"]
    assert full["tier_share"]["2"] > cla["tier_share"]["2"]
    assert full["tier_share"]["3"] < cla["tier_share"]["3"]
    assert full["transfer_mean_ms"] < cla["transfer_mean_ms"]
    for stats in rows.values():
        assert stats["failed"] == 0 and stats["rejected"] == 0
