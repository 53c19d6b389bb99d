"""What a validation keeps between runs: the calibration (reused only while it fits and
is fresh) and this machine's phase times."""

from __future__ import annotations

import json
import os

import click
import pytest

from testbed.cli.options import Duration, Fraction
from testbed.emulation.lanes import fabric_split
from testbed.scenario import load_scenario
from testbed.validate.engines import machine_cache as cache
from tests.conftest import ROOT


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NETKV_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def scenario(**over):
    return load_scenario(ROOT / "scenarios" / "validate.yaml", overrides=over or None)


def test_a_calibration_is_reused_for_the_same_fabric_only_and_while_fresh(own_cache):
    sc = scenario()
    assert cache.load_calibration(sc)[0] is None
    path = cache.save_calibration(sc, {"capacity_factor": {"1": 0.9}}, now=1000.0)
    assert path.is_relative_to(own_cache)
    got, why = cache.load_calibration(sc, max_age_s=3600, now=1000.0 + 600)
    assert got == {"capacity_factor": {"1": 0.9}} and "reusing" in why and "10 min" in why
    stale, why = cache.load_calibration(sc, max_age_s=3600, now=1000.0 + 7200)
    assert stale is None and "stale" in why
    # another dilation, scale or fabric is another key; the flow model's own terms are not
    for other in ({"emulation.time_dilation": 4}, {"emulation.scale": 1e-4},
                  {"cluster.pods": 4}):
        assert cache.calibration_key(scenario(**other)) != cache.calibration_key(sc)
    assert cache.calibration_key(scenario(schedulers=["rr"], seeds=3)) == \
        cache.calibration_key(sc)


def test_a_calibration_on_one_datapath_split_is_not_reused_on_another(own_cache):
    """With ovs_instances: auto the scenario alone does not say how many OVS daemons
    carried the calibration's fabric (one fabric on a server, or fabrics side by side
    each on its share): the split it was measured on is part of its key."""
    sc = scenario()
    four = {"kind": "user", "ovs_daemons": 4, "why": "16 cores, a daemon per 4"}
    one = {"kind": "user", "ovs_daemons": 1, "why": "5 cores: a split needs more than 4"}
    cache.save_calibration(sc, {"capacity_factor": {"1": 0.9}}, split=four)
    assert cache.load_calibration(sc, split=four)[0] == {"capacity_factor": {"1": 0.9}}
    assert cache.load_calibration(sc, split=one)[0] is None
    assert cache.load_calibration(sc, split={**four, "why": "said otherwise"})[0] is not None
    # the split validate plans for fabrics side by side is each one's share
    cell = sc.points()[0][1]
    assert fabric_split(cell, 2)["kind"] == "user"
    assert fabric_split(cell, 2)["ovs_daemons"] == max(1, (os.cpu_count() or 1) // 2 // 4)


def test_an_unreadable_cache_entry_is_measured_again(own_cache):
    sc = scenario()
    path = cache.save_calibration(sc, {"capacity_factor": {}})
    path.write_text("{not json")
    got, why = cache.load_calibration(sc)
    assert got is None and "unreadable" in why


def test_phase_times_start_from_the_defaults_then_follow_this_machine(own_cache):
    times, source = cache.load_timings()
    assert times == cache.DEFAULT_TIMINGS and "development machine" in source
    cache.record_timings({"fabric_s": 20.0, "judge_s": float("nan")})
    times, source = cache.load_timings()
    assert source == "measured on this machine" and times["fabric_s"] == 20.0
    assert times["judge_s"] == cache.DEFAULT_TIMINGS["judge_s"]  # NaN is no measurement
    cache.record_timings({"fabric_s": 10.0})  # averaged with what was there
    assert cache.load_timings()[0]["fabric_s"] == pytest.approx(15.0)
    doc = json.loads((own_cache / "timings.json").read_text())
    doc["machine"] = {"host": "elsewhere", "cpus": 1}
    (own_cache / "timings.json").write_text(json.dumps(doc))
    assert cache.load_timings()[0] == cache.DEFAULT_TIMINGS


def test_a_fabrics_load_alone_is_no_measured_phase_time(own_cache):
    cache.record_timings({"datapath_cores": 0.9, "other_cores": 0.4})  # an emulate run's
    times, source = cache.load_timings()
    assert times["datapath_cores"] == 0.9 and "development machine" in source
    assert times["fabric_s"] == cache.DEFAULT_TIMINGS["fabric_s"]
    doc = json.loads((own_cache / "timings.json").read_text())
    assert set(doc["timings"]) == {"datapath_cores", "other_cores"}  # no defaults kept
    cache.record_timings({"fabric_s": 20.0})
    assert cache.load_timings()[1] == "measured on this machine"


@pytest.mark.parametrize(("text", "want"), [("4%", 0.04), ("0.04", 0.04), ("12.5%", 0.125)])
def test_target_ci_takes_a_percentage_or_a_fraction(text, want):
    assert Fraction().convert(text, None, None) == pytest.approx(want)


@pytest.mark.parametrize("text", ["4", "0", "150%", "four"])
def test_target_ci_refuses_what_is_not_a_fraction(text):
    with pytest.raises(click.BadParameter, match="4% or 0.04"):
        Fraction().convert(text, None, None)


@pytest.mark.parametrize(("text", "want"), [("540", 540.0), ("540s", 540.0), ("9m", 540.0),
                                            ("1.5h", 5400.0)])
def test_budget_takes_seconds_minutes_hours(text, want):
    assert Duration().convert(text, None, None) == want


@pytest.mark.parametrize("text", ["-3m", "0", "soon", "9x"])
def test_budget_refuses_what_is_not_a_duration(text):
    with pytest.raises(click.BadParameter):
        Duration().convert(text, None, None)
