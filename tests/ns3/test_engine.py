"""The ns-3 engine for real: the compiled program under the flow engine's control plane,
on the shipped validation scenario cut to a few seconds (about a second per run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cells import Task
from testbed.ns3sim.ns3_fabric import Ns3Fabric, wire_payload_share
from testbed.ns3sim.packet_network import PacketNetwork
from testbed.ns3sim.process import Ns3Error, Ns3Process
from testbed.runner import run_simulated, run_task
from testbed.scenario import load_scenario
from testbed.scenario.ns3 import TWIN_BEHAVIOURS
from testbed.sweep import Executor
from testbed.topologies.routing import PairPaths, path_hops
from testbed.topologies.traffic_classes import engine_notice_bytes
from tests.conftest import ROOT

SHORT = {"workload.warmup_s": 1, "workload.measure_s": 4}
RECORDS = ("requests.csv", "transfers.csv", "links.csv", "ns3.json")


def scenario(**overrides):
    return load_scenario(ROOT / "scenarios" / "validate.yaml", {**SHORT, **overrides})


def one_cell(sc, scheduler="netkv-full", seed=1) -> dict:
    """One cell's records in memory (requests, transfers, links, summary, ns3.json)."""
    result = run_task(Task(0, {}, sc, scheduler, seed, engine="ns3"))
    return {**result, "ns3": result["files"]["ns3.json"]}


def cell_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.glob("cells/*/*/seed*/*")) if p.name in RECORDS}


def test_a_scenario_and_seed_repeat_byte_for_byte_serial_or_on_two_processes(tmp_path):
    sc = scenario(schedulers=["rr", "netkv-full"])
    serial = run_simulated(sc, tmp_path / "a", engine="ns3")
    with Executor.local(2) as pool:
        parallel = run_simulated(sc, tmp_path / "b", executor=pool, engine="ns3")
    a, b = cell_bytes(serial.folder), cell_bytes(parallel.folder)
    assert len(a) == 2 * len(RECORDS) and a == b
    assert serial.folder.name.startswith("validate-ns3-")
    other = cell_bytes(run_simulated(scenario(schedulers=["rr", "netkv-full"], seed=2),
                                   tmp_path / "c", engine="ns3").folder)
    assert [v for k, v in other.items() if k.endswith("transfers.csv")] != \
        [v for k, v in a.items() if k.endswith("transfers.csv")]


def test_a_start_jitter_perturbs_the_packets_and_repeats_by_its_seed(tmp_path):
    def transfers(**over):
        run = run_simulated(scenario(schedulers=["rr"], **over), tmp_path / str(len(seen)),
                          engine="ns3").folder
        seen.append(run)
        return (next(run.glob("cells/*/rr/seed1")) / "transfers.csv").read_text()

    seen: list[Path] = []
    plain = transfers()
    assert transfers(**{"ns3.start_jitter_us": 0.0, "ns3.jitter_seed": 5}) == plain
    one = transfers(**{"ns3.start_jitter_us": 600.0, "ns3.jitter_seed": 1})
    assert one != plain and transfers(**{"ns3.start_jitter_us": 600.0,
                                         "ns3.jitter_seed": 1}) == one
    assert transfers(**{"ns3.start_jitter_us": 600.0, "ns3.jitter_seed": 2}) != one
    # the same transfers, offered at the same moments: only the packets moved
    def offered(text):  # request, shard, src, dst, tier, start; rows come in end order
        return sorted(line.split(",")[:5] + [line.split(",")[7]] for line in text.splitlines())

    assert offered(one) == offered(plain)


def test_cells_on_dask_workers_write_the_same_records(tmp_path):
    """A local Dask cluster stands in for servers: each worker builds nothing (the program
    is this machine's) and hands its cell back; the folder is the serial run's."""
    sc = scenario(schedulers=["rr"])
    serial = run_simulated(sc, tmp_path / "a", engine="ns3")
    on_dask = run_simulated(sc, tmp_path / "b", executor=Executor.dask("local:2"), engine="ns3")
    assert cell_bytes(serial.folder) == cell_bytes(on_dask.folder)


def test_every_request_ends_once_and_every_shard_keeps_its_tcp_counters():
    got = one_cell(scenario())
    shards = got["transfers"]
    assert shards and got["summary"]["completed"] == got["summary"]["requests"] > 0
    assert all(r["state"] for r in got["requests"])
    for row in shards:
        assert row["end"] > row["start"] and row["retrans_segs"] >= 0
        assert 0 < row["min_rtt_s"] <= row["rtt_s"] < 1.0, row
    assert got["ns3"]["scale"] == 2e-4 and not got["ns3"]["line_rate"]
    assert got["ns3"]["packets"]["hops"] > got["ns3"]["packets"]["hosts"] > 0


def test_the_transfer_engine_s_transfers_land_at_their_notice_after_the_last_shard():
    # the emulation's decode worker lands an engine's transfer when the prefill's notice
    # arrives, after its writes completed; the pusher's when its last shard is in. ns-3
    # sends the notice as a packet of its own: the same requests, placed alike under RR,
    # land later by at least its wire time
    def landed_after(transport):
        got = one_cell(scenario(**{"emulation.kv_transport": transport}), "rr")
        last: dict[str, float] = {}
        for row in got["transfers"]:
            last[row["request"]] = max(last.get(row["request"], 0.0), row["end"])
        return {r["id"]: r["transfer_end"] - last[r["id"]] for r in got["requests"]
                if r["transfer_end"] is not None and r["id"] in last}

    pusher, engine = landed_after("pusher"), landed_after("mooncake")
    assert pusher and all(gap == 0.0 for gap in pusher.values())
    frame = 8 * (engine_notice_bytes(4) + 40) / 20e6  # one packet on a 20 Mbit/s link
    assert set(engine) == set(pusher) and all(gap >= frame for gap in engine.values())


def shard_ends(program, transport: str, sizes: list[float], first: float | None = None):
    """Shards of `sizes` wire bytes from one host to another on a tier-2 path, all at once
    (after a lone one of `first` bytes has ended, when given): when each ended."""
    sc = scenario(**{"emulation.kv_transport": transport})
    net = PacketNetwork(sc, 1, program, clock=lambda: 0.0)
    try:
        spec = sc.cluster.spec()
        src, dst = next((a.name, b.name) for a in spec.prefill_pool
                        for b in spec.decode_pool if spec.tier(a.name, b.name) == 2)
        path = net.transfer_paths(src, dst, "per-pair", 1)[0]
        at = 0.0
        if first is not None:
            net.add_flow(path, first / net.scale, 0.0, shard=(0, 4))
            at = net.run_until(60.0)
            net.pop_finished(at)
        flows = [net.add_flow(path, size / net.scale, at, shard=(k % 4, 4))
                 for k, size in enumerate(sizes)]
        while net.flows:
            end = net.run_until(at + 60.0)
            assert end is not None, "a shard never ended"
            net.pop_finished(end)
        return [f.end - at for f in flows]
    finally:
        net.close()


def test_the_transfer_engine_s_lanes_carry_a_pair_s_shards_four_at_a_time(program):
    # eight shards to one target at once: the pusher opens a connection for each and all
    # share the path to the end; the engine's four lanes (the pair met already) carry
    # the first four, the path theirs alone, and the others each in the lane that frees
    pusher = shard_ends(program, "pusher", [1e6] * 8, first=1000)
    engine = shard_ends(program, "mooncake", [1e6] * 8, first=1000)
    assert max(engine[:4]) < min(engine[4:])
    assert max(engine[:4]) < 0.7 * min(pusher)
    assert max(engine) == pytest.approx(max(pusher), rel=0.15)  # the same bytes in all


def test_a_pair_s_first_write_through_the_engine_goes_alone(program):
    # the workers send a target's first write alone (the engine's descriptor exchange
    # refused shards arriving together): its other shards start once it ended
    pusher = shard_ends(program, "pusher", [1e6] * 4)
    engine = shard_ends(program, "mooncake", [1e6] * 4)
    assert max(pusher) < 1.3 * min(pusher)  # side by side
    assert engine[0] < 0.5 * min(engine[1:])
    assert max(engine) == pytest.approx(max(pusher), rel=0.15)


def lone_transfer_s(sc, program, wire: float) -> float:
    """One shard of `wire` bytes between a tier-2 pair, nothing else on the fabric."""
    net = PacketNetwork(sc, 1, program, clock=lambda: 0.0)
    try:
        spec = sc.cluster.spec()
        src, dst = next((a.name, b.name) for a in spec.prefill_pool for b in spec.decode_pool
                        if spec.tier(a.name, b.name) == 2)
        flow = net.add_flow(net.transfer_paths(src, dst, "per-pair", 1)[0], wire / net.scale,
                            0.0)
        end = net.run_until(30.0)
        (done,) = net.pop_finished(end)
        assert done is flow and net.stats[flow.flow_id].retrans_segs >= 0
        return end
    finally:
        net.close()


@pytest.mark.parametrize("twin", ["stock", "default"])
def test_a_lone_transfer_takes_its_bytes_over_the_nics_payload_rate(program, twin):
    """One 2 MB shard across the fabric, nothing else on it: its time is the bytes over
    the host link's rate at the payload's share of a segment on the wire (1448 bytes in
    ns-3's 1490, or in the emulation's 1514-byte frame under the twin's "frames"; the
    slowest link on its path is the tier-3 one at a quarter of it: cross-pod pairs are
    excluded), plus slow start's round trips: within 10%."""
    sc = scenario() if twin == "default" else scenario(**{"ns3.twin": []})
    wire = 2_000_000
    end = lone_transfer_s(sc, program, wire)
    rate = min(lk.rate_bps for lk in Ns3Fabric(sc, 1).links if lk.tier <= 2) / 8
    ideal = wire / (rate * wire_payload_share(sc))
    assert ideal < end < 1.10 * ideal, (end, ideal)


def test_the_twins_frames_give_a_segment_the_emulations_frame_time(program):
    """A bulk transfer under "frames" takes the emulation's 1514-byte frame's time per
    segment, ns-3's 1490-byte one without: the ratio of the two within a quarter of the
    1.6% it is made of."""
    bare = [b for b in TWIN_BEHAVIOURS if b not in ("frames", "htb")]
    wire = 4_000_000
    without = lone_transfer_s(scenario(**{"ns3.twin": bare}), program, wire)
    framed = lone_transfer_s(scenario(**{"ns3.twin": [*bare, "frames"]}), program, wire)
    assert framed / without == pytest.approx(1514 / 1490, abs=0.004), (framed, without)


def test_per_pair_ecmp_takes_the_controllers_path_and_per_flow_spreads_shards():
    sc = scenario(schedulers=["rr"])
    pairs = PairPaths(sc.cluster.spec())
    pinned = one_cell(sc, "rr")["transfers"]
    assert all(path_hops(t["path"]) == pairs.path(t["src"], t["dst"]) for t in pinned)
    hashed = one_cell(scenario(schedulers=["rr"], **{"network.ecmp": "per-flow"}),
                      "rr")["transfers"]
    spec = sc.cluster.spec()
    for t in hashed:
        assert path_hops(t["path"]) in spec.paths(t["src"], t["dst"]), t
    spread = {}
    for t in hashed:
        spread.setdefault(t["request"], set()).add(t["path"])
    assert max(len(paths) for paths in spread.values()) > 1  # a transfer's shards split


def test_a_failed_link_is_routed_around_while_it_is_down():
    link, at, back = "agg0-core0", 1.5, 4.0
    sc = scenario(schedulers=["rr"], faults=[
        {"kind": "link_down", "target": link, "at_s": at, "duration_s": back - at}])
    got = one_cell(sc, "rr")
    crossing = [t for t in got["transfers"] if at + 0.01 < t["start"] and t["end"] < back
                and any({a, b} == {"agg0", "core0"} for a, b in path_hops(t["path"]))]
    assert not crossing
    assert got["summary"]["completed"] == got["summary"]["requests"]


def test_a_failed_decode_instance_gets_no_more_bytes_and_its_requests_end():
    sc = scenario(schedulers=["rr"])
    first = one_cell(sc, "rr")["transfers"]
    victim, at = first[0]["dst"], first[0]["start"] + 0.01
    got = one_cell(scenario(schedulers=["rr"], faults=[
        {"kind": "decode_down", "target": victim, "at_s": at}]), "rr")
    assert not [t for t in got["transfers"] if t["dst"] == victim and t["end"] > at]
    hit = [r for r in got["requests"] if r["decode"] == victim or r["recovery"]]
    assert hit and all(r["state"] for r in got["requests"])


def test_the_oracle_sees_background_and_never_the_kv_flows(program):
    """c_tier through the controller's own function, from the switches' egress counters:
    the KV class alone leaves it at zero; a tier-3 background stream per instance at 30%
    of the tier's rate raises tier 3's."""
    sc = scenario()
    for background in (0.0, 0.3):
        now = [0.0]
        net = PacketNetwork(sc, 1, program, clock=lambda now=now: now[0])
        try:
            spec = sc.cluster.spec()
            for a in spec.prefill_pool:  # KV shards across pods, on every tier-3 link
                for b in spec.decode_pool[:4]:
                    net.add_flow(net.transfer_paths(a.name, b.name, "per-pair", 1)[0], 20e9, 0)
            if background:
                from testbed.topologies.replica import background_partner

                for inst in spec.instances:
                    other = background_partner(spec, inst.name, 3)
                    net.set_stream(inst.name, other, background * 25e9 * net.scale, 0.0)
            now[0] = 1.0
            assert net.run_until(1.0) is None
            net.tier_congestion()
            now[0] = 2.0
            assert net.run_until(2.0) is None
            congestion = net.tier_congestion()
        finally:
            net.close()
        if background:
            assert 0.05 < congestion[3] < 0.6, congestion
        else:
            assert max(congestion.values()) < 0.01, congestion


def test_dctcp_marks_where_cubic_drops():
    cubic = one_cell(scenario())["ns3"]
    dctcp = one_cell(scenario(**{"ns3.transport": "dctcp"}))["ns3"]
    assert dctcp["transport"] == "dctcp" and dctcp["ecn_k_packets"] >= 2
    assert dctcp["packets"]["marked_ce"] > 0 and cubic["packets"]["marked_ce"] == 0
    assert 4 * dctcp["drops"]["kv"] < cubic["drops"]["kv"], (dctcp["drops"], cubic["drops"])


def test_a_window_cut_below_one_segment_still_sends(program):
    """DCTCP's cut during recovery can leave ns-3's byte-counted window under one segment
    with nothing in flight: Linux (cwnd in segments, at least one) sends; a connection
    that does not waits forever. Competing sets under DCTCP with a 10 ms RTO floor at the
    demo's scale reach that state."""
    from testbed.validate.engines.fabric_probes import COMPETE_GB, COMPETING
    from testbed.validate.engines.ns3_probes import Prober
    from testbed.validate.judging.validity import tier_pairs
    from testbed.validate.pipelines.ns3_pipeline import for_ns3

    sc = for_ns3(load_scenario(ROOT / "scenarios" / "validate.yaml",
                               {"ns3.transport": "dctcp", "ns3.rto_min_ms": 10}))
    prober = Prober(sc, program, tier_pairs(sc.cluster.spec())[1])
    try:
        got = [prober.competing(COMPETE_GB * 1e9, n) for n in COMPETING]
    finally:
        prober.close()
    assert [len(g["seconds"]) for g in got] == list(COMPETING)
    assert all(0 < s < 60 for g in got for s in g["seconds"]), got


def test_mfs_levels_go_on_the_wire_as_their_dscp_classes():
    got = one_cell(scenario(**{"network.flow_policy": "mfs"}))
    levels = {k for k, v in got["summary"]["level_bytes"].items() if v > 0}
    assert len(levels) >= 2 and got["ns3"]["kv_levels"] == 8, got["summary"]["level_bytes"]


def test_the_program_names_what_it_refuses(program):
    proc = Ns3Process(program)
    try:
        with pytest.raises(Ns3Error, match="bogus"):
            proc.ask("bogus 1 2")
    finally:
        proc.close()


def _testbed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_cli_runs_ns3_and_refuses_a_capture_it_cannot_make(tmp_path):
    done = _testbed("simulate", "scenarios/validate.yaml", "--engine", "ns3", "--quiet",
                    "--set", "workload.warmup_s=1", "--set", "workload.measure_s=2",
                    "--set", "schedulers=[rr]", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.name.startswith("validate-ns3-")
    assert json.loads((folder / "summary.json").read_text())["engine"] == "ns3"
    refused = _testbed("simulate", "scenarios/validate.yaml", "--engine", "ns3", "--set",
                       "emulation.capture=[tor0-agg0]", "--out", str(tmp_path))
    assert refused.returncode == 2 and "emulation.capture" in refused.stderr, refused.stderr


def test_a_missing_wheel_says_how_to_install_it(monkeypatch):
    from importlib import metadata

    from testbed.ns3sim import program as kvnet

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(kvnet.metadata, "distribution", absent)
    with pytest.raises(kvnet.Ns3Unavailable, match="run.sh setup"):
        kvnet.program_path()


def test_a_program_built_elsewhere_is_taken_as_it_is(monkeypatch, program, tmp_path):
    from importlib import metadata

    from testbed.ns3sim import program as kvnet

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(kvnet.metadata, "distribution", absent)  # no wheel, no build
    monkeypatch.setenv("NETKV_NS3_PROGRAM", str(program))
    monkeypatch.setenv("NETKV_NS3_RELEASE", "3.44")
    assert kvnet.program_path() == program and kvnet.ns3_version() == "3.44"
    (tmp_path / "kvnet").write_text("not a program")
    monkeypatch.setenv("NETKV_NS3_PROGRAM", str(tmp_path / "kvnet"))
    with pytest.raises(kvnet.Ns3Unavailable, match="NETKV_NS3_PROGRAM"):
        kvnet.program_path()
