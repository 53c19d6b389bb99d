"""End to end on the shipped trace: the paper's headline, qualitatively (section VI-C, VI-K)."""

import pytest

from testbed.runner import run_simulated
from testbed.scenario import load_scenario
from tests.conftest import ROOT

DEFAULT = str(ROOT / "scenarios" / "default.yaml")


@pytest.mark.slow
def test_rag_at_full_load_netkv_beats_cla_and_rr_and_shifts_tiers(tmp_path):
    sc = load_scenario(DEFAULT, {"seeds": 3})
    rows = {r.scheduler: r.stats for r in run_simulated(sc, tmp_path).rows}
    full, cla, rr = rows["netkv-full"], rows["cla"], rows["rr"]
    assert full["ttft_mean_ms"] < cla["ttft_mean_ms"] < rr["ttft_mean_ms"]
    assert full["tier_share"]["2"] > cla["tier_share"]["2"]
    assert full["tier_share"]["3"] < cla["tier_share"]["3"]
    assert full["transfer_mean_ms"] < cla["transfer_mean_ms"]
    for stats in rows.values():
        assert stats["failed"] == 0 and stats["rejected"] == 0


def test_the_table_of_a_run_that_completed_nothing_shows_dashes():
    """A run whose every request was rejected has no TTFT, TBT or transfer figures; its
    table row shows "-" for them instead of failing the command at the end."""
    from testbed.cells import Row, format_table
    from testbed.metrics import aggregate

    sc = load_scenario(DEFAULT, {"schedulers": ["rr", "cla"]})
    point = sc.points()[0][0]
    empty = {"requests": 3, "completed": 0, "ttft_mean_ms": None, "ttft_p50_ms": None,
             "ttft_p99_ms": None, "tbt_mean_ms": None, "slo_attainment": 0.0,
             "goodput_rps": 0.0, "transfer_mean_ms": None, "tier_share": {}}
    done = {**empty, "completed": 3, "ttft_mean_ms": 900.0, "ttft_p50_ms": 800.0,
            "ttft_p99_ms": 1500.0, "tbt_mean_ms": 30.0, "transfer_mean_ms": 200.0,
            "tier_share": {"3": 1.0}}
    rows = [Row(point, "rr", aggregate([empty]), [empty]),
            Row(point, "cla", aggregate([done]), [done])]
    table = format_table(sc, rows)
    rr_line = next(line for line in table.splitlines() if "| RR " in line or "| RR|" in line)
    assert "-±-" in rr_line and "900" in table
