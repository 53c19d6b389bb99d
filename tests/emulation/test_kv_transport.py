"""KV through Mooncake's Transfer Engine on a small Mininet fabric: the library moves the
shards, the records keep them, and the fabric carries them in the KV class."""

from __future__ import annotations

import json

import pytest

from testbed.scenario import load_scenario
from testbed.topologies.traffic_classes import KV, engine_ports
from testbed.workers.transfer_engine import installed
from testbed.workloads.build import build_workload
from tests.conftest import TRACE
from tests.emulation.conftest import write_small
from tests.emulation.test_emulate import SHORT, emulate_quietly, rows

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(not installed(), reason="Mooncake's Transfer Engine wheel is "
                                 "not installed (./run.sh setup installs it)")]

UP = ["tor0>agg0", "tor0>agg1", "tor1>agg0", "tor1>agg1"]


def test_the_transfer_engine_moves_every_shard_in_the_kv_class(tmp_path):
    # two runs on one fabric: the second's engines start beside the first's ports in
    # TIME_WAIT
    path = write_small(tmp_path, TRACE, {
        **SHORT, "emulation.kv_transport": "mooncake", "emulation.capture": UP})
    emulate_quietly(path, tmp_path)
    (cell,) = (tmp_path / "results").glob(
        "fabric-test-emulation-*/cells/000-base/netkv-full/seed1")
    sc = load_scenario(path)
    requests = rows(cell / "requests.csv")
    assert len(requests) == len(build_workload(sc, sc.seed).requests)
    assert {r["state"] for r in requests} == {"completed"}
    # every shard the senders wrote landed (the decode workers heard of each) and the
    # records keep each with its bytes and times
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["wire_bytes_sent"] == summary["wire_bytes_received"] > 0
    transfers = rows(cell / "transfers.csv")
    assert sum(float(t["bytes"]) for t in transfers) == pytest.approx(
        summary["wire_bytes_sent"] / sc.emulation.scale, rel=0.01)
    assert all(float(t["end"]) > float(t["start"]) for t in transfers)
    # the engine's connections' TCP_INFO, read by descriptor in the senders' processes
    assert all(t["retrans_segs"] != "" and int(t["retrans_segs"]) >= 0 for t in transfers)
    assert any(t["min_rtt_s"] != "" and float(t["min_rtt_s"]) > 0 for t in transfers)
    # on the wire: the engine's ports, AF41 from the ToR on (its sockets set no DSCP)
    ports = {str(p) for p in engine_ports(sc.emulation.kv_port)}
    flows = rows(cell / "capture" / "flows.csv")
    data = [f for f in flows if f["dport"] in ports and int(f["bytes"]) > 10_000]
    assert data, flows
    assert all(f["class"] == "kv" and int(f["dscp"]) == KV.dscp for f in data)
    # to kv_port only the notices that land transfers (AF41 from the sender), no pusher's
    # stream: a few hundred bytes a transfer
    notices = [f for f in flows if f["dport"] == str(sc.emulation.kv_port)]
    assert notices and all(f["class"] == "kv" and int(f["dscp"]) == KV.dscp for f in notices)
    assert sum(int(f["bytes"]) for f in notices) < 1000 * len(transfers), notices
    # the switches' KV class carried them, and nothing of them leaked into best effort
    links = rows(cell / "links.csv")
    kv = sum(float(r["kv_util"]) for r in links)
    bg = sum(float(r["bg_util"]) for r in links)
    assert kv > 0 and bg < 0.01 * kv, (kv, bg)
