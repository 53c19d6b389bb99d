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


def test_the_program_s_pfc_answer_is_read_link_by_link():
    from testbed.ns3sim.roce_facts import roce_facts

    lines = ["l 0 0 3 2000000000 9000 12 0 0 0 1", "l 1 1 1 500000000 4000 3 5 0 0 0",
             "w 1 1 2500000000 2000000000", "g 7 2 1"]
    got = roce_facts(lines, lambda link, side: (f"a{link}", f"b{side}"), 4, ["x>y"])
    assert (got["pauses"], got["paused_s"], got["max_kv_queue_bytes"]) == (4, 2.5, 9000)
    assert (got["marks"], got["kv_drops"], got["cnps"], got["naks"], got["timeouts"]) == (
        15, 5, 7, 2, 1)
    assert got["paused_at_end"] == ["a0->b0"]
    assert got["watchdog_trips"] == [{"egress": "a1->b1", "at_s": 2.5, "paused_s": 2.0}]
    assert got["valley_routes"] == 4 and got["dependency_cycle"] == ["x>y"]
