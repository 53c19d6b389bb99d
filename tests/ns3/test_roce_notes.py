"""What a RoCE run's records make the CLI say: cycles, the watchdog's breaks, pauses
left standing; nothing for TCP runs or calm ones."""

from __future__ import annotations

import json

from testbed.ns3sim.roce_notes import folder_notes, roce_notes

CALM = {"roce": {"dependency_cycle": [], "watchdog_trips": [], "paused_at_end": [],
                 "kv_drops": 0}}


def test_calm_and_tcp_runs_say_nothing():
    assert roce_notes([CALM, CALM]) == []
    assert roce_notes([{"transport": "cubic"}]) == []


def test_a_cycle_the_watchdog_s_breaks_and_a_standing_pause_are_each_named():
    stuck = {"roce": {"dependency_cycle": ["agg4>tor2", "tor2>agg7", "agg7>tor3", "tor3>agg4"],
                      "watchdog_trips": [{"egress": "tor2->agg7", "paused_s": 2.0},
                                         {"egress": "tor3->agg4", "paused_s": 2.0}],
                      "paused_at_end": ["core1->agg4"], "kv_drops": 203}}
    lines = roce_notes([CALM, stuck])
    assert len(lines) == 3
    assert "1 of 2 RoCE runs" in lines[0] and "agg4 > tor2 > agg7 > tor3 > agg4" in lines[0]
    assert "broke 2 pause(s)" in lines[1] and "tor2->agg7, tor3->agg4" in lines[1]
    assert "203 KV packets" in lines[1]
    assert lines[2].startswith("1 RoCE run(s) ended with pauses standing")


def test_a_folder_s_runs_are_read_and_a_damaged_record_skipped(tmp_path):
    for k, facts in enumerate((CALM, {"roce": {**CALM["roce"], "paused_at_end": ["a->b"]}})):
        seed = tmp_path / "cells" / "000-base" / "rr" / f"seed{k + 1}"
        seed.mkdir(parents=True)
        (seed / "ns3.json").write_text(json.dumps(facts))
    bad = tmp_path / "cells" / "000-base" / "cla" / "seed1"
    bad.mkdir(parents=True)
    (bad / "ns3.json").write_text("{not json")
    assert folder_notes(tmp_path) == [
        "1 RoCE run(s) ended with pauses standing (a cycle the watchdog had not yet "
        "broken: ns3.json roce.paused_at_end)"]
