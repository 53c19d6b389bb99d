"""The claims' run-to-run spread in the flow model (validate/judging/trajectory.py)."""

import math

import pytest

from testbed.cells import Task
from testbed.runner import run_task
from testbed.scenario import load_scenario
from testbed.validate.judging.trajectory import (
    _summary,
    draw_spreads,
    gains,
    mean_ttft,
    seed_draws,
    spread,
)
from tests.conftest import ROOT


def test_gains_are_the_claims_only_and_relative_to_the_baseline():
    got = gains({"rr": 10.0, "cla": 8.0, "netkv-full": 5.0})
    assert got == pytest.approx({"cla vs rr": -0.2, "netkv-full vs rr": -0.5,
                                 "netkv-full vs cla": -0.375})


def test_mean_ttft_counts_measured_served_requests_only():
    rows = [{"measured": True, "state": "completed", "ttft": 1.0},
            {"measured": True, "state": "completed", "ttft": 3.0},
            {"measured": False, "state": "completed", "ttft": 100.0},
            {"measured": True, "state": "rejected", "ttft": None}]
    assert mean_ttft(rows) == 2.0
    assert mean_ttft(rows[2:]) is None


def test_the_spread_is_pooled_within_seeds_not_across_them():
    # two seeds whose gains differ by 0.5 between them but by +-0.01 within each
    per_seed = {7: [0.10, 0.12, 0.08], 8: [0.60, 0.62, 0.58]}
    got = _summary(per_seed)
    assert math.isclose(got["sd"], 0.02)  # within a seed: (0.01^2 * 2 + ...) / 2 dof
    assert (got["low"], got["high"], got["draws"], got["seeds"]) == (0.08, 0.62, 3, 2)
    assert got["shifts"] == pytest.approx({"7": 0.0, "8": 0.0})  # own draw = their mean


def test_each_seed_keeps_how_far_its_draws_mean_lies_from_its_own_draw():
    """The claims pair each seed's own draw; the verdict moves it to the draws' mean."""
    got = _summary({3: [0.30, 0.10, 0.20], 4: [0.0, 0.06, 0.0]})
    assert got["shifts"] == pytest.approx({"3": -0.1, "4": 0.02})
    (spread_,) = draw_spreads({"cla vs rr": got}).values()
    assert spread_.flow_draws == 3 and spread_.shifts == pytest.approx({3: -0.1, 4: 0.02})
    assert spread_.shift([3, 3, 4]) == pytest.approx(-0.04)  # per seed judged, not request
    assert spread_.shift([4, 9]) == pytest.approx(0.02)  # a seed with no draws is left out


def test_draws_of_the_same_requests_differ_for_a_scheduler_that_breaks_ties():
    """Short validation scenario, flow model: RR's order ignores draws (no claim of its
    own), while CLA*'s tie-breaks move its gain from one draw to the next."""
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1.0, "workload.measure_s": 6.0})
    got = spread(sc, draws=3)["000-base"]
    assert set(got) == {"cla vs rr", "netkv-full vs rr", "netkv-full vs cla"}
    assert got["cla vs rr"]["sd"] > 0
    assert got["cla vs rr"]["low"] < got["cla vs rr"]["high"]
    assert set(got["cla vs rr"]["shifts"]) == {str(sc.seed)}


def test_a_seeds_first_draw_is_the_run_the_claims_pair():
    """The shift to the draws' mean is taken from the seed's own draw: it must be the very
    run the verdict's flow engine records for that seed."""
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                       {"workload.warmup_s": 1.0, "workload.measure_s": 6.0})
    (point, cell), = sc.points()
    own = {key: mean_ttft(run_task(Task(0, point, cell, key, sc.seed))["requests"])
           for key in cell.schedulers}
    got = seed_draws(cell, sc.seed, draws=2)
    assert {c: g[0] for c, g in got.items()} == gains(own)


def test_a_claim_the_seeds_own_draw_cannot_measure_is_left_out(monkeypatch):
    """Its shift is taken from the seed's own draw: without it, the list would start at
    another draw and the shift would be measured from the wrong run."""
    from types import SimpleNamespace

    from testbed.validate.judging import trajectory

    served = {("rr", 0): 10.0, ("cla", 0): None, ("rr", 1): 10.0, ("cla", 1): 8.0,
              ("rr", 2): 10.0, ("cla", 2): 6.0}

    def fake(cell, key, seed, workload):
        ttft = served[(key, seed // trajectory.OFFSET)]
        rows = [] if ttft is None else [{"measured": True, "state": "completed", "ttft": ttft}]
        return SimpleNamespace(requests=rows)

    monkeypatch.setattr(trajectory, "build_workload", lambda cell, seed: None)
    monkeypatch.setattr(trajectory, "simulate", fake)
    cell = SimpleNamespace(schedulers=["rr", "cla"])
    assert trajectory.seed_draws(cell, 0, draws=3) == {}
    served[("cla", 0)] = 9.0
    got = trajectory.seed_draws(cell, 0, draws=3)
    assert list(got) == ["cla vs rr"] and got["cla vs rr"] == pytest.approx([-0.1, -0.2, -0.4])
