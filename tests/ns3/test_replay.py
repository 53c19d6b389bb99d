"""ns-3 fed a packet run's own schedule (ns3sim/replayer.py) and judged transfer by transfer
(validate/ns3_replay.py), and `testbed replay`'s refusals. Without root an ns-3 run
stands in for the emulation's: its folder named as an emulation run, each cell given the
fidelity record an emulated run writes (faithful, the replica it applied)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.api import simulate
from testbed.ns3sim.replayer import busiest, emulation_twin, replay, twin_replica
from testbed.records import read_csv
from testbed.scenario import load_scenario
from testbed.sweep import Executor
from testbed.validate.engines import ns3_replay
from testbed.validate.engines.ns3_replay import Unreplayable, competitors, judge, replay_runs
from tests.conftest import ROOT

SHORT = {"workload.warmup_s": 1, "workload.measure_s": 3, "seeds": 1,
         "schedulers": ["rr", "netkv-full"]}


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    """An ns-3 run dressed as an emulation run folder."""
    tmp = tmp_path_factory.mktemp("replay")
    sc = load_scenario(ROOT / "scenarios" / "validate.yaml", SHORT)
    run = simulate(sc, engine="ns3", jobs=2, out=tmp)
    folder = run.folder.rename(tmp / run.folder.name.replace("-ns3-", "-emulation-"))
    (_, point), = sc.points()  # the emulation writes each point's scenario beside its cells
    (next(folder.glob("cells/*/")) / "scenario.yaml").write_text(
        yaml.safe_dump(point.model_dump(mode="json"), sort_keys=False))
    applied = twin_replica(point)
    for cell in folder.glob("cells/*/*/seed*"):
        (cell / "fidelity.json").write_text(json.dumps(
            {"verdict": "faithful", "reasons": [], "replica": applied}))
    (folder / "fidelity.json").write_text(json.dumps({"all_faithful": True}))
    return folder


def copy(folder: Path, tmp: Path) -> Path:
    out = tmp / folder.name
    shutil.copytree(folder, out)
    return out


def test_every_shard_is_replayed_on_its_path_from_its_start(stand_in):
    cell = next(stand_in.glob("cells/*/rr/seed1"))
    rows = read_csv(cell / "transfers.csv")
    sc = load_scenario(cell.parent.parent / "scenario.yaml")
    got = replay(emulation_twin(sc), rows, 1)
    assert len(got) == len(rows) and all(r["end"] is not None for r in got)
    mine = {(r["request"], r["shard"]): r for r in rows}
    for r in got:  # what was recorded is kept; ns-3 says when it ended and how
        src = mine[(r["request"], r["shard"])]
        assert (r["start"], r["bytes"], r["src"], r["dst"]) == \
            (src["start"], src["bytes"], src["src"], src["dst"])
        assert r["path"] == src["path"]  # the per-pair hash is the recorded path's
        assert float(r["end"]) > float(r["start"])
    # ns-3 replaying its own run: its ends again, but for a handshake the replay's warm
    # connections skip and the warm-up's bytes; a slipped start or size is tens of %
    doc = judge({"rr": (rows, got, {})})
    assert doc["all"]["median_abs_error"]["point"] < 0.05, doc["all"]


def test_busiest_counts_the_connections_a_run_had_open_at_once():
    rows = [{"src": "a", "dst": "b", "shard": 0, "start": 0.0, "end": 2.0},
            {"src": "a", "dst": "b", "shard": 0, "start": 1.0, "end": 3.0},
            {"src": "a", "dst": "b", "shard": 0, "start": 3.0, "end": 4.0},  # after both
            {"src": "a", "dst": "b", "shard": 1, "start": 0.0, "end": 1.0}]
    assert busiest(rows) == {("a", "b", 0): 2, ("a", "b", 1): 1}


def test_judging_pairs_whole_transfers_timeouts_and_competitors():
    def row(req, shard, start, end, timeouts, path="h1>t>h2"):
        return {"request": req, "shard": shard, "src": path[:2], "dst": path[-2:], "tier": 1,
                "bytes": 1e9, "start": start, "end": end, "timeouts": timeouts, "path": path}
    emu = [row("a", 0, 0.0, 1.0, 1), row("a", 1, 0.0, 2.0, 0),
           row("b", 0, 0.5, 1.5, 0), row("c", 0, 0.5, 1.0, 0, "h3>u>h4")]
    ns3 = [row("a", 0, 0.0, 1.0, 0), row("a", 1, 0.0, 3.0, 1),
           row("b", 0, 0.5, 1.5, 0), row("c", 0, 0.5, 1.0, 0, "h3>u>h4")]
    doc = judge({"x": (emu, ns3, {})})
    assert doc["transfers"] == 3 and doc["all"]["n"] == 3
    assert doc["by_tier"]["1"]["mean_error"] == pytest.approx(0.5 / 3)  # a: 3 s for 2 s
    assert competitors(emu) == {"a": 0, "b": 1, "c": 0}  # b starts while a is on its link
    assert doc["by_competitors"]["1"]["n"] == 1
    t = doc["timeouts"]
    assert (t["n"], t["both"], t["emulation_only"], t["ns3_only"], t["neither"]) == (4, 0, 1, 1, 2)
    assert t["one_engine_share"] == 0.5


def test_replay_judges_runs_writes_its_own_folder_and_the_cli_refuses_with_nothing_written(
        stand_in, tmp_path):
    with Executor.local(2) as pool:
        doc, out = replay_runs([stand_in, stand_in], pool, tmp_path / "out")
    assert doc["overall"]["transfers"] > 0 and doc["overall"]["lost_on_ns3"] == 0
    assert doc["floor"] is not None  # two runs of one cell: ns-3 against itself, exactly
    assert doc["floor"]["p90_abs_error"] == 0.0
    assert json.loads((out / "replay.json").read_text())["overall"] == doc["overall"]
    assert sorted(p.relative_to(out).as_posix() for p in out.glob("cells/*/*/*/*/*.csv")) == \
        sorted(f"cells/{i}/{p.relative_to(stand_in / 'cells').as_posix()}/transfers.csv"
               for i in (0, 1) for p in stand_in.glob("cells/*/*/seed*"))

    def refused(folder: Path, why: str) -> None:
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        done = subprocess.run([sys.executable, "-m", "testbed", "replay", str(folder),
                               "--out", str(tmp_path / "nowhere")], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and why in done.stdout + done.stderr, done
        assert str(folder) in done.stdout + done.stderr
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before

    partial = copy(stand_in, tmp_path / "partial")
    (partial / "PARTIAL").write_text("stopped\n")
    refused(partial, "partial")
    unfaithful = copy(stand_in, tmp_path / "unfaithful")
    for f in unfaithful.glob("cells/*/*/seed*/fidelity.json"):
        f.write_text(json.dumps({"verdict": "cpu-bound", "reasons": ["CPU-bound"]}))
    refused(unfaithful, "unfaithful (CPU-bound)")
    other = copy(stand_in, tmp_path / "other")
    for f in other.glob("cells/*/*/seed*/fidelity.json"):
        doc = json.loads(f.read_text())
        doc["replica"]["rto_min_ms"] = 100.0  # the kernel's 200 wall ms at dilation 2
        f.write_text(json.dumps(doc))
    refused(other, "rto_min_ms is 100.0")
    flows = copy(stand_in, tmp_path / "per-flow")
    for f in flows.glob("cells/*/scenario.yaml"):
        raw = yaml.safe_load(f.read_text())
        raw.setdefault("network", {})["ecmp"] = "per-flow"
        f.write_text(yaml.safe_dump(raw))
    refused(flows, "per-flow")
    refused(partial / "cells", "not an emulation run folder")
    # one unfaithful cell of several is left out and named, the rest replayed
    mixed = copy(stand_in, tmp_path / "mixed")
    next(mixed.glob("cells/*/rr/seed1/fidelity.json")).write_text(
        json.dumps({"verdict": "cpu-bound", "reasons": ["CPU-bound"]}))
    kept, skipped = ns3_replay.replayable(mixed, twin_replica)
    assert list(kept) == ["000-base/netkv-full/seed1"] and "rr/seed1: unfaithful" in skipped[0]
    with pytest.raises(Unreplayable, match="ns-3's own packets"):
        (tmp_path / "v").mkdir()
        (tmp_path / "v" / "comparison.json").write_text("{}")
        ns3_replay.emulation_run(tmp_path / "v")
