"""Fault schedules on packets and in the flow model (the control plane is the same code in
both): a cascade of decode deaths where the second may be the first's recovery target,
and a mixed schedule (core link down, two decode deaths, controller stopped). On the
same schedule, RR with a fixed recovery path ends the same number of requests in each
terminal state in both engines, and nothing is lost or left behind.

Neither RR nor a fixed path depends on timing; the adaptive policy does (it weighs the
oracle's live bandwidth against the recompute queue, and aborts at the TTFT budget's
edge), so it would flip near-ties between engines: its choices are tested on their own
(test_recovery, test_control_plane) and on packets (test_emulate)."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter

import pytest

from testbed.cells import check_conservation
from testbed.emulation import cleanup
from testbed.scenario import load_scenario
from testbed.workloads.build import build_workload
from tests.conftest import ROOT, TRACE
from tests.emulation.conftest import write_small

pytestmark = [pytest.mark.root, pytest.mark.slow]

BASE = {"schedulers": ["rr"], "seeds": 1, "drain_s": 60, "network.ecmp": "per-pair",
        "workload.profile": "rag", "workload.warmup_s": 1, "workload.measure_s": 6,
        "workload.load": 2.0}
SCHEDULES = {
    # a generous SLO, here and below: no abort sits on the edge of the TTFT budget, where
    # a few ms of timing would decide it differently in the two engines
    "cascade": {"recovery": {"policy": "always_recompute", "heartbeat_s": 0.2,
                             "missed_heartbeats": 3},
                "workload.slo_s": 60,
                "faults": [{"at_s": 3.0, "kind": "decode_down", "target": "i4"},
                           {"at_s": 3.3, "kind": "decode_down", "target": "i5"}]},
    "mixed": {"recovery": {"policy": "always_migrate", "heartbeat_s": 0.2,
                           "missed_heartbeats": 3},
              "workload.slo_s": 60,
              "faults": [{"at_s": 2.0, "kind": "link_down", "target": "agg0-core0",
                          "duration_s": 1.5},
                         {"at_s": 3.0, "kind": "decode_down", "target": "i6"},
                         {"at_s": 3.4, "kind": "decode_down", "target": "i3"},
                         {"at_s": 4.0, "kind": "controller_down", "duration_s": 2.0}]},
}


def states(folder_glob, tmp_path) -> tuple[Counter, list[dict]]:
    (path,) = (tmp_path / "results").glob(folder_glob + "/cells/000-base/rr/seed1/requests.csv")
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    return Counter(r["state"] for r in rows), rows


def run(cmd: str, path, tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "testbed", cmd, str(path), "--out",
                           str(tmp_path / "results"), "--quiet"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_rr_ends_the_same_requests_the_same_way_on_packets_and_in_the_flow_model(
        tmp_path, name):
    path = write_small(tmp_path, TRACE, {**BASE, **SCHEDULES[name]})
    run("emulate", path, tmp_path)
    assert cleanup.find_leftovers().empty
    run("simulate", path, tmp_path)
    packets, rows = states("fabric-test-emulation-*", tmp_path)
    flows, _ = states("fabric-test-flowsim-*", tmp_path)
    sc = load_scenario(path)
    expected = len(build_workload(sc, sc.seed).requests)
    check_conservation(rows, expected)
    assert sum(packets.values()) == sum(flows.values()) == expected
    assert any(r["recovery"] for r in rows), "the schedule hit no request"
    assert packets == flows, f"packets {dict(packets)} vs flow model {dict(flows)}"
