"""How many fabrics run side by side, and what a lane's namespaces are called: pure parts
(the fabrics themselves are tested as root in tests/emulation/test_lanes.py)."""

import pytest

from testbed.emulation import cleanup
from testbed.emulation.lanes import fabric_cores, lane_cell, lane_count
from testbed.scenario import load_scenario
from testbed.topologies.placement import lane_daemon_prefix, lane_netns
from testbed.validate import sequential


def test_two_cores_carry_one_fabric_and_sixteen_carry_several():
    per = fabric_cores(1)
    assert per == 2.0  # a datapath daemon's main thread plus the workers
    assert lane_count("auto", 2, 8, per, "user") == (1, lane_count("auto", 2, 8, per, "user")[1])
    k16, why = lane_count("auto", 16, 8, per, "user")
    assert k16 == 6 and "16 cores" in why  # a quarter of the cores kept spare
    assert lane_count("auto", 16, 2, per, "user")[0] == 2  # never more than the seeds
    assert lane_count("auto", 16, 8, fabric_cores(4), "user")[0] == 2  # 4 daemons + workers


def test_a_fabric_measured_busier_than_its_floor_gets_fewer_lanes():
    assert fabric_cores(1, measured=5.0) == 5.0
    assert fabric_cores(1, measured=0.4) == 2.0  # never below a core per daemon + workers
    assert lane_count("auto", 16, 8, fabric_cores(1, 5.0), "user")[0] == 2


def test_auto_keeps_one_fabric_on_the_kernel_datapath_and_a_number_is_obeyed():
    assert lane_count("auto", 64, 8, 2.0, "kernel")[0] == 1
    assert lane_count(3, 2, 8, 2.0, "kernel")[0] == 3  # asked for: the user's call
    assert lane_count(3, 2, 2, 2.0, "user")[0] == 2  # but not more than the seeds
    with pytest.raises(ValueError, match="fabrics must be >= 1"):
        lane_count(0, 2, 2, 2.0, "user")


def test_a_lane_runs_the_cell_on_a_private_userspace_daemon(write_scenario):
    cell = load_scenario(write_scenario("name: x\nworkload: {trace: TRACE}\n"))
    mine = lane_cell(cell)
    assert mine.emulation.private_ovs and mine.emulation.datapath == "user"
    assert mine.model_dump(exclude={"emulation"}) == cell.model_dump(exclude={"emulation"})


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
