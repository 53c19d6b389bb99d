"""How many fabrics run side by side, and what a lane's namespaces are called: pure parts
(the fabrics themselves are tested as root in tests/emulation/test_lanes.py)."""

import json
import os

import pytest
import yaml

from testbed.emulation import cleanup
from testbed.emulation.lanes import (
    Lane,
    datapath_cores,
    fabric_load,
    fabric_need,
    lane_cell,
    lane_count,
    lane_daemons,
    lanes_ceiling,
    plan_lanes,
)
from testbed.emulation.net import resolve_split
from testbed.scenario import load_scenario
from testbed.topologies.placement import lane_daemon_prefix, lane_netns
from testbed.validate.judging import sequential


def test_two_cores_carry_one_fabric_and_sixteen_carry_several():
    assert lane_count("auto", 2, 8, 2.0, "user")[0] == 1
    k16, why = lane_count("auto", 16, 8, 2.0, "user")
    assert k16 == 6 and "16 cores" in why  # a quarter of the cores kept spare
    assert lane_count("auto", 16, 2, 2.0, "user")[0] == 2  # never more than the seeds
    assert lane_count("auto", 16, 8, 5.0, "user")[0] == 2  # 4 daemons + workers


def test_nothing_measured_here_keeps_one_fabric():
    k, why = lane_count("auto", 64, 8, None, "user")
    assert k == 1 and "measured" in why
    assert lane_count(3, 64, 8, None, "user")[0] == 3  # asked for: the user's call


def test_auto_keeps_one_fabric_on_the_kernel_datapath_and_a_number_is_obeyed():
    assert lane_count("auto", 64, 8, 2.0, "kernel")[0] == 1
    assert lane_count(3, 2, 8, 2.0, "kernel")[0] == 3  # asked for: the user's call
    assert lane_count(3, 2, 2, 2.0, "user")[0] == 2  # but not more than the seeds
    with pytest.raises(ValueError, match="fabrics must be >= 1"):
        lane_count(0, 2, 2, 2.0, "user")


def _cell(write_scenario, emulation: str):
    return load_scenario(write_scenario(
        f"name: x\nworkload: {{trace: TRACE}}\nemulation: {{{emulation}}}\n"))


def test_a_fabric_side_by_side_gets_the_daemons_its_forwarding_needs(write_scenario):
    # measured alone: 2 cores of forwarding at dilation 1 (scale 2e-4), 2 cores besides
    threads = [{"process": f"ovs-vswitchd@netkv-ovs{k}", "thread": "ovs-vswitchd",
                "role": "main", "busy_median": 0.5} for k in range(4)]
    threads.append({"process": "i3", "thread": "python3", "role": "worker", "busy_median": 0.9})
    one = _cell(write_scenario, "scale: 2.0e-4, time_dilation: 1")
    timings = {"datapath_cores": datapath_cores(threads, one.emulation), "other_cores": 2.0}
    assert fabric_need(one, timings) == (4 + 2.0, 4)  # 2 cores of work, half a core each
    two = _cell(write_scenario, "scale: 2.0e-4, time_dilation: 2")
    assert fabric_need(two, timings) == (2 + 2.0, 2)  # half the packets per wall second
    assert lane_count("auto", 16, 8, fabric_need(two, timings)[0], "user")[0] == 3
    fixed = _cell(write_scenario, "scale: 2.0e-4, time_dilation: 2, ovs_instances: 1, "
                                  "private_ovs: true")
    assert fabric_need(fixed, timings)[1] == 1  # a count the scenario gives is kept
    assert fabric_need(one, {}) is None  # nothing measured on this machine
    sized, why = resolve_split(lane_cell(two), "user", 8, daemons=2)
    assert sized.emulation.ovs_instances == 2 and "forwarding measured here" in why
    assert resolve_split(lane_cell(fixed), "user", 8, daemons=3)[0].emulation \
        .ovs_instances == 1  # as given


def test_a_lane_runs_the_cell_on_a_private_userspace_daemon(write_scenario):
    cell = load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"))
    mine = lane_cell(cell)
    assert mine.emulation.private_ovs and mine.emulation.datapath == "user"
    assert mine.model_dump(exclude={"emulation"}) == cell.model_dump(exclude={"emulation"})


def test_a_dead_lane_s_error_shows_its_log_from_the_last_traceback(write_scenario,
                                                                     tmp_path):
    lane = Lane(0, load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n")),
                tmp_path)
    lane.workdir.mkdir(parents=True)
    frames = [f'  File "/x/m{k}.py", line {k}, in f{k}\n    call{k}()\n' for k in range(12)]
    lane.log.write_text("building\n" * 30 + "Traceback (most recent call last):\n"
                        + "".join(frames) + "UnicodeDecodeError: 'utf-8' codec\n")
    said = lane._died()
    assert 'm0.py", line 0' in said and "UnicodeDecodeError" in said  # where it was raised
    assert "building" not in said
    lane.log.write_text("".join(f"line {k}\n" for k in range(40)))  # no traceback: the end
    said = lane._died()
    assert "line 39" in said and "line 28" in said and "line 27" not in said


def test_testbed_clean_knows_every_namespace_a_lane_makes():
    for name in (lane_netns(3), f"{lane_daemon_prefix(3)}0", "netkv-ovs2"):
        assert cleanup.NETNS_RE.match(name), name
    assert not cleanup.NETNS_RE.match("netkv-lane")
    assert cleanup.namespace_files(lane_netns(3)) == cleanup.STATE_DIR / "lane3"
    assert cleanup.namespace_files(f"{lane_daemon_prefix(3)}1") == \
        cleanup.STATE_DIR / "lane3" / "ovs1"
    assert cleanup.namespace_files("netkv-ovs2") == cleanup.STATE_DIR / "ovs2"
    assert cleanup.WORKER_RE.search("python -m testbed.emulation.lane {}")


def test_side_by_side_the_plan_needs_fewer_rounds_for_the_same_measurement():
    def round_wall(window):
        return 60.0 + 2.0 * window

    one = sequential.plan(12.0, 0.05, 0.04, 3600.0, round_wall, 30.0, 8.0, 120.0, 8)
    three = sequential.plan(12.0, 0.05, 0.04, 3600.0, round_wall, 30.0, 8.0, 120.0, 8,
                            lanes=3)
    assert three.lanes == 3 and three.limited_by == one.limited_by == "target"
    assert three.rounds * three.lanes * three.window_s >= three.needed_window_s
    assert three.expected_wall_s < one.expected_wall_s


def test_a_fabric_alone_records_its_forwarding_work_and_side_by_side_does_not(
        tmp_path, write_scenario):
    sc = _cell(write_scenario, "scale: 2.0e-4, time_dilation: 2")
    point = tmp_path / "cells" / "000-base"
    (point / "fabric").mkdir(parents=True)
    (point / "scenario.yaml").write_text(yaml.safe_dump(sc.model_dump(mode="json")))
    for k, (busy, bound) in enumerate([(0.4, False), (0.3, False), (0.98, True)]):
        run = point / ["rr", "cla", "netkv-full"][k] / "seed1"
        run.mkdir(parents=True)
        (run / "router.json").write_text(json.dumps({"t0": 100.0}))
        (run / "requests.csv").write_text("id,done\nr1,1.0\n")
        (run / "workers.json").write_text("{}")
        (run / "summary.json").write_text(json.dumps({"cpu_busy_p95": 0.5}))
        (run / "fidelity.json").write_text(json.dumps({"datapath_bound": bound, "threads": [
            {"process": "ovs-vswitchd", "thread": "ovs-vswitchd", "role": "main",
             "busy_median": busy},
            {"process": "ovs-vswitchd", "thread": "handler1", "role": "handler",
             "busy_median": 0.2}]}))
    got = fabric_load(tmp_path)
    cores = 0.5 * (os.cpu_count() or 1)
    # the run at the datapath's ceiling is left out: its work is understated
    assert got["datapath_cores"] == pytest.approx(0.35)  # at 2e-4 / 2: the reference rate
    assert got["other_cores"] == pytest.approx(max(0.0, cores - 0.35))
    (point / "lanes").mkdir()  # the point ran side by side: each fabric had a share
    assert fabric_load(tmp_path) == {}


def _ran_side_by_side(root, count: int, bound: list[bool]):
    point = root / "cells" / "000-base"
    for k in range(count):
        (point / "lanes" / f"lane{k}").mkdir(parents=True, exist_ok=True)
    for k, b in enumerate(bound):
        run = point / "rr" / f"seed{k + 1}"
        run.mkdir(parents=True, exist_ok=True)
        (run / "fidelity.json").write_text(json.dumps({"datapath_bound": b, "cpu_bound": False}))


def test_fabrics_side_by_side_that_were_flagged_lower_the_ceiling_auto_keeps(
        tmp_path, write_scenario, monkeypatch):
    _ran_side_by_side(tmp_path / "a", 6, [False, True, False])
    assert lanes_ceiling(tmp_path / "a", None) == 5  # one fewer than were flagged
    assert lanes_ceiling(tmp_path / "a", 2) == 2  # never above what is known
    _ran_side_by_side(tmp_path / "b", 3, [False, False])
    assert lanes_ceiling(tmp_path / "b", None) is None  # nothing learnt: no ceiling
    assert lanes_ceiling(tmp_path / "b", 2) == 3  # three stayed faithful: raised
    assert lanes_ceiling(tmp_path / "c", 4) == 4  # nothing ran side by side
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    one = _cell(write_scenario, "scale: 2.0e-4, time_dilation: 2, datapath: user")
    light = {"datapath_cores": 0.05, "other_cores": 1.0}  # 1 daemon + 1: 2 cores a fabric
    assert plan_lanes("auto", one, light, 8)[0] == 6
    k, why, daemons = plan_lanes("auto", one, {**light, "lanes_ceiling": 2}, 8)
    assert (k, daemons) == (2, 1) and "flagged" in why
    assert plan_lanes(3, one, {**light, "lanes_ceiling": 2}, 8)[0] == 3  # asked for


def test_an_emulation_records_what_its_fabric_carried(tmp_path, monkeypatch):
    from testbed.validate.engines import machine_cache as cache

    monkeypatch.setenv("NETKV_CACHE_DIR", str(tmp_path / "cache"))
    _ran_side_by_side(tmp_path, 4, [True])
    cache.record_fabric(tmp_path)
    assert cache.load_timings()[0]["lanes_ceiling"] == 3
    _ran_side_by_side(tmp_path / "next", 3, [True])
    cache.record_fabric(tmp_path / "next")  # kept as measured, not averaged with the last
    assert cache.load_timings()[0]["lanes_ceiling"] == 2


def test_a_lane_never_gets_more_daemons_than_its_share_of_the_cores(write_scenario,
                                                                    monkeypatch):
    one = _cell(write_scenario, "scale: 2.0e-4, time_dilation: 1")
    heavy = {"datapath_cores": 1.5, "other_cores": 1.0}  # 3 cores at 2e-4: six daemons
    assert fabric_need(one, heavy)[1] == 6
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert lane_daemons(one, heavy, 2) == 6  # 8 cores each
    assert lane_daemons(one, heavy, 4) == 3  # 4 cores each: one left for the workers
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert lane_daemons(one, heavy, 2) == 1
    assert lane_daemons(one, {}, 2) is None  # nothing measured: the share decides
