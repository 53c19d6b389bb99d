"""A sequential validation's looks, on flow-model runs standing in for packets (no root):
what each look judges, when it stops, and what it records."""

from __future__ import annotations

import json
import time

import pytest

from testbed.runner import run_simulated
from testbed.scenario import load_scenario
from testbed.validate.engines.flow_match import flow_scenario
from testbed.validate.judging import sequential
from testbed.validate.pipelines import sequential_plan
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    base = load_scenario(ROOT / "scenarios" / "validate.yaml",
                         overrides={"schedulers": ["rr", "netkv-full"]})
    sc = sequential_plan.planned_scenario(base, 2, 10.0)
    folder = run_simulated(sc, tmp_path_factory.mktemp("packets")).folder
    for summary in folder.glob("cells/*/*/seed*/summary.json"):  # as the packets mark them
        doc = json.loads(summary.read_text())
        summary.write_text(json.dumps({**doc, "fidelity": "faithful"}))
    return sc, folder


def looks_for(sc, half_width: float, budget_s: float = 1e6) -> sequential_plan.Looks:
    plan = sequential.Plan(2, 10.0, 20.0, 30.0, 10.0, budget_s, half_width, "target")
    looks = sequential_plan.Looks(sc, plan, time.monotonic(), judge_s=1.0)
    looks.flow_scenario = flow_scenario(sc, None, {})
    return looks


def test_the_planned_scenario_runs_trace_segments_of_the_planned_window(planned):
    sc, _ = planned
    assert sc.seeds == 2 and sc.workload.measure_s == 10.0 and sc.workload.seed_segments


def test_a_look_judges_what_is_in_and_stops_once_the_width_is_reached(planned):
    sc, folder = planned
    wide = looks_for(sc, half_width=0.9)
    assert wide(0, [1], folder) is False  # stop: every primary interval is 90 points narrow
    (look,) = wide.looks
    assert look["n"] > 10 and look["faithful"]
    assert look["level"] == pytest.approx(sequential.look_level(1, 2))
    assert [(c["scheduler"], c["baseline"]) for c in look["claims"]] == [("netkv-full", "rr")]
    # the look counts the round's draws too: the flow model again on its requests
    (claim,) = look["claims"]
    drawn = claim["difference_with_draws"]
    assert drawn["high"] - drawn["low"] >= claim["difference"]["high"] - claim["difference"]["low"]
    assert wide.reason.startswith(("conclusive", "target width"))
    record = wide.record(12.0)
    assert record["rounds_run"] == 1 and record["predicted_wall_s"] == pytest.approx(10 - 1 + 30)


def test_a_look_goes_on_while_unresolved_and_pools_the_rounds(planned):
    sc, folder = planned
    narrow = looks_for(sc, half_width=1e-4)
    first = narrow(0, [1], folder)
    if narrow.looks[0]["claims"][0]["verdict"] == "inconclusive":
        assert first is True  # unresolved, width not reached, budget left: next round
    assert narrow(0, [2], folder) is False  # the planned rounds are done
    one, two = narrow.looks
    assert two["n"] > one["n"]  # the second segment's requests joined the first's
    assert two["level"] == pytest.approx(sequential.look_level(2, 2))
    assert narrow.record(5.0)["reason"] in ("planned rounds done",) or \
        narrow.reason.startswith("conclusive")


def test_a_round_of_fabrics_side_by_side_is_one_look_at_all_its_seeds(planned):
    sc, folder = planned
    both = looks_for(sc, half_width=1e-4)
    both(0, [1, 2], folder)
    (look,) = both.looks
    one = looks_for(sc, half_width=1e-4)
    one(0, [1], folder)
    assert look["seed"] == "1, 2" and look["n"] > one.looks[0]["n"]
    assert both.rounds_run() == 1 and both.seeds_run() == 2
    assert look["level"] == pytest.approx(sequential.look_level(1, 2))


def test_an_unfaithful_round_is_left_out_and_said(planned, tmp_path):
    sc, folder = planned
    import shutil

    copy = tmp_path / "packets"
    shutil.copytree(folder, copy)
    bad = copy / "cells" / "000-base" / "rr" / "seed1" / "summary.json"
    bad.write_text(json.dumps({**json.loads(bad.read_text()), "fidelity": "unfaithful"}))
    lines = []
    looks = looks_for(sc, half_width=0.9)
    looks.on_look = lines.append
    assert looks(0, [1], copy) is True  # nothing judged yet: go on
    assert looks.looks[0]["n"] == 0 and looks.unfaithful == ["000-base seed 1"]
    assert "not faithful" in lines[0]


def test_a_round_that_would_overrun_the_budget_is_not_started(planned):
    sc, folder = planned
    looks = looks_for(sc, half_width=1e-4, budget_s=5.0)  # 30 s rounds, 5 s budget
    assert looks(0, [1], folder) is False
    assert looks.reason.startswith(("budget", "conclusive"))


def test_each_sweep_point_has_its_own_looks(tmp_path):
    base = load_scenario(ROOT / "scenarios" / "validate.yaml",
                         overrides={"schedulers": ["rr", "netkv-full"],
                                    "sweep": {"workload.load": [0.5, 1.0]}})
    sc = sequential_plan.planned_scenario(base, 2, 10.0)
    folder = run_simulated(sc, tmp_path).folder
    for summary in folder.glob("cells/*/*/seed*/summary.json"):
        doc = json.loads(summary.read_text())
        summary.write_text(json.dumps({**doc, "fidelity": "faithful"}))
    looks = looks_for(sc, half_width=1e-4)
    for index in (0, 1):
        for seed in (1, 2):
            looks(index, [seed], folder)
    assert [(x["point"][:3], x["look"]) for x in looks.looks] == \
        [("000", 1), ("000", 2), ("001", 1), ("001", 2)]
    assert looks.rounds_run() == 2
    assert looks.final_level() == pytest.approx(sequential.look_level(2, 2))


def test_a_runs_stop_lasts_until_its_last_record_is_written(tmp_path):
    """The next run starts only once this one's packets are judged and its records are
    out, seconds after the router's last record: the planner's stop must count them. Its
    drain factor is the round's: the runs' drains summed over the pilot's."""
    import os

    from testbed.validate.pipelines.pipeline import run_overheads

    sc = load_scenario(ROOT / "scenarios" / "validate.yaml")
    wl, dilation = sc.workload, sc.emulation.time_dilation
    t0 = 1_000_000.0
    for sched, drain, stop in (("rr", 4.0, 8.0), ("cla", 1.0, 6.0), ("netkv-full", 1.0, 7.0)):
        cell = tmp_path / "cells" / "000-base" / sched / "seed1"
        cell.mkdir(parents=True)
        last_done = wl.warmup_s + wl.measure_s + drain  # modelled
        (cell / "requests.csv").write_text(f"id,done\nr1,{last_done}\n")
        (cell / "router.json").write_text(json.dumps({"t0": t0}))
        for name in ("workers.json", "summary.json", "fidelity.json"):
            (cell / name).write_text("{}")
        end = t0 + last_done * dilation
        stamps = {"workers.json": t0 - 3.0, "router.json": end + 1.0,
                  "summary.json": end + stop - 0.5, "fidelity.json": end + stop}
        for name, when in stamps.items():
            os.utime(cell / name, (when, when))
    got = run_overheads(tmp_path, sc, {"rr": 1.0, "cla": 2.0, "netkv-full": 2.0})
    assert got["worker_start_s"] == pytest.approx(3.0)
    assert got["worker_stop_s"] == pytest.approx(7.0)  # not 1.0: the router's record
    assert got["drain_factor"] == pytest.approx(6.0 / 5.0)  # the median ratio was 0.5
