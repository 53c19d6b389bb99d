"""On ns-3 seeds are added in doubling rounds until the claims are conclusive: each seed its
own trace segment, the plan fixed before the first look, the looks at spent levels."""

import json

import pytest

from testbed.api import validate
from testbed.scenario import load_scenario
from testbed.validate.judging import sequential
from testbed.validate.pipelines import ns3_rounds
from tests.conftest import ROOT


def test_the_plan_doubles_seeds_while_runs_and_judging_fit_the_budget():
    # a seed's judging: its runs' looks and share of the judging, in seconds, on the workers
    overhead = ns3_rounds.judging_s(3, 2, per_run=1.0)
    assert overhead == pytest.approx(1.5)
    per = ns3_rounds.per_seed_s(1.0, overhead)
    assert per == pytest.approx(2.5)
    assert ns3_rounds.planned_seeds(8, 1.0, budget_s=15 * per, spent_s=0.0,
                                    overhead_s=overhead) == [8]
    assert ns3_rounds.planned_seeds(8, 1.0, budget_s=16 * per, spent_s=0.0,
                                    overhead_s=overhead) == [8, 16]
    assert ns3_rounds.planned_seeds(8, 1.0, budget_s=16 * per + 5, spent_s=6.0,
                                    overhead_s=overhead) == [8]
    assert ns3_rounds.planned_seeds(8, 1e-6, budget_s=1e9, spent_s=0.0)[-2:] == [512, 1000]
    assert ns3_rounds.expected_s([8, 16], 1.0, overhead) == pytest.approx(16 * per)
    # the judging does not grow with the packets: a finer scale's seeds cost their runs
    coarse = ns3_rounds.planned_seeds(8, 1.0, 600, 0.0, segments=52, overhead_s=2.6)
    fine = ns3_rounds.planned_seeds(8, 13.0, 1200, 0.0, segments=52, overhead_s=2.6)
    assert coarse[-1] == 156 and fine[-1] == 52, (coarse, fine)
    # up to the trace's every segment, then a pass over them a look: each one more draw
    assert ns3_rounds.planned_seeds(8, 1e-6, budget_s=1e9, spent_s=0.0, segments=52)[:6] == \
        [8, 16, 32, 52, 104, 156]
    assert ns3_rounds.planned_seeds(8, 1e-6, budget_s=1e9, spent_s=0.0, segments=5)[:3] == \
        [5, 10, 15]
    assert ns3_rounds.planned_seeds(8, 1e-6, budget_s=1e9, spent_s=0.0, segments=12)[:3] == \
        [8, 12, 24]


def test_the_looks_spend_alpha_by_the_share_of_planned_seeds():
    levels = [ns3_rounds.look_level(a, b, 32) for a, b in ((0, 8), (8, 16), (16, 32))]
    assert levels[0] > levels[1] > levels[2] > 0.95  # early looks need more evidence
    spent = sum(1 - lv for lv in levels)
    assert spent == pytest.approx(sequential.obrien_fleming_spent(1.0))  # all of alpha
    assert ns3_rounds.look_level(0, 8, 8) == pytest.approx(0.95)


def test_a_one_seed_scenario_gets_seeds_in_rounds_each_its_own_segment(tmp_path):
    from testbed.workloads.build import build_workload

    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1, "workload.measure_s": 3,
                        "schedulers": ["rr", "netkv-full"]})
    result = validate(sc, tmp_path, packets="ns3", jobs=2, budget_s=150.0)
    seq = json.loads((result.folder / "sequential.json").read_text())
    assert seq["engine"] == "ns3" and seq["looks"] and seq["planned_seeds"][0] == 8
    last = seq["looks"][-1]
    assert result.comparison["judged"]["seeds"] == last["seeds"]
    assert seq["reason"] in ("every mean-TTFT claim conclusive", "planned rounds done",
                             "the next round would not fit in the budget")
    assert [look["seeds"] for look in seq["looks"]] == seq["planned_seeds"][:len(seq["looks"])]
    cells = sorted(result.emulation.folder.glob("cells/*/rr/seed*"))
    assert len(cells) == last["seeds"]  # every round's seeds in the packets' one folder
    judged = load_scenario(result.folder / "scenario.yaml")  # what was judged, for judge
    assert judged.seeds == last["seeds"] and judged.workload.seed_segments
    for seed in (1, last["seeds"]):  # seed k replays the k-th segment of the trace
        got = [r.split(",")[0] for r in (result.emulation.folder / "cells").glob(
            f"*/rr/seed{seed}/requests.csv").__next__().read_text().splitlines()[1:]]
        want = [r.request_id for r in build_workload(judged, seed).requests]
        assert sorted(got) == sorted(want)
    assert "### Plan and stop" in (result.folder / "report.md").read_text()
    assert any(line.startswith("stopped after") for line in result.summary_lines())
    # the last look read the very claims the full judging then wrote, and left no runs
    published = ns3_rounds.primary_verdicts(result.comparison)
    assert [(v["verdict"], v["difference"]["point"]) for v in last["claims"]] == \
        [(v["verdict"], pytest.approx(v["difference"]["point"], abs=1e-12)) for v in published]
    assert [v["difference"]["low"] for v in last["claims"]] == \
        pytest.approx([v["difference"]["low"] for v in published], abs=1e-12)
    assert not (result.folder / "looks").exists()
