"""ns-3 fed the emulation's own schedule, judged transfer by transfer: does ns-3's twin
carry the transfers real Linux TCP carried in the time Linux took?

Each faithful cell of an emulation run is replayed on ns-3 (ns3sim/replayer.py: its KV
shards at their recorded instants, on its paths, with its background) and every whole
transfer (first shard's start to slowest shard's end) is set against the emulation's:
the paired |error| (median and p90 with bootstrap intervals, over the transfers above the
validity floor, and over all), the bias per tier and per number of competitors (whole
transfers of the run in flight at its start on a link it crosses), and the retransmission
timeouts shard by shard (how often exactly one engine waited one out). Beside it, where two
runs of one cell were given, the emulation's own floor (validate/engines/repeat.py: packets
against packets on the transfers offered alike) and ns-3's error on those very transfers.

A folder that cannot be replayed is refused before anything runs (`Unreplayable`, naming
the folder and the reason): not an emulation run, partial, no transfers.csv, every cell
unfaithful, faults or KV priority levels (their records do not keep what the fabric did
to each chunk), per-flow ECMP (OVS's hash is not ns-3's), or a replica, as its runs
recorded it (fidelity.json "replica"), other than the one ns-3's twin builds.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from testbed.inputs import InputError, read_json
from testbed.records import PARTIAL, read_csv
from testbed.sweep import Lost
from testbed.topologies.routing import packet_ecmp, path_hops
from testbed.validate.judging import model_errors, stats, validity

COMPETITORS = ((0, 0, "0"), (1, 1, "1"), (2, 3, "2-3"), (4, 7, "4-7"), (8, 10**9, "8+"))


class Unreplayable(InputError):
    """An emulation run ns-3 cannot replay: the message names the folder and why."""


def emulation_run(folder: Path) -> Path:
    """The emulation's run folder: `folder` itself, or the one a validation holds."""
    if not folder.is_dir():
        raise Unreplayable(f"{folder}: not a folder")
    if (folder / "comparison.json").exists():
        found = sorted(folder.glob("*-emulation-*"))
        if not found:
            raise Unreplayable(f"{folder}: a validation without an emulation run (ns-3's "
                               "own packets need no replay)")
        return found[-1]
    if "-emulation-" not in folder.name or not (folder / "fidelity.json").exists():
        raise Unreplayable(f"{folder}: not an emulation run folder (<name>-emulation-<stamp>/ "
                           "with fidelity.json), nor a validation holding one")
    return folder


def replayable(folder: Path, built) -> tuple[dict[str, tuple[object, Path]], list[str]]:
    """The cells of `folder` (an emulation run, or a validation holding one) ns-3 can
    replay, key -> (their point's scenario, cell folder), and what was left out and why.
    `built(scenario)`: the replica ns-3's twin builds for a point (replica_record's
    shape). Raises Unreplayable where nothing can be replayed."""
    from testbed.scenario import ScenarioError, load_scenario

    run = emulation_run(folder)
    if (run / PARTIAL).exists():
        raise Unreplayable(f"{run}: partial (the run did not finish: {PARTIAL} is there)")
    cells = sorted(p.parent for p in (run / "cells").glob("*/*/seed*/summary.json"))
    if not cells:
        raise Unreplayable(f"{run}: no finished cell (cells/<point>/<scheduler>/seed*/)")
    points: dict[Path, object] = {}
    kept, skipped = {}, []
    for cell in cells:
        key = str(cell.relative_to(run / "cells"))
        point = cell.parent.parent
        if point not in points:
            try:
                scenario = load_scenario(point / "scenario.yaml")
            except (ScenarioError, OSError) as exc:
                raise Unreplayable(f"{point / 'scenario.yaml'}: {exc}") from None
            points[point] = _refusal(scenario, point) or scenario
        scenario = points[point]
        if isinstance(scenario, str):
            raise Unreplayable(scenario)
        why = _cell_refusal(cell, scenario, built)
        if why:
            skipped.append((key, why))
        else:
            kept[key] = (scenario, cell)
    if not kept:
        reasons = {why for _, why in skipped}
        raise Unreplayable(f"{run}: no cell can be replayed ("
                           + (f"every cell: {reasons.pop()}" if len(reasons) == 1 else
                              "; ".join(f"{key}: {why}" for key, why in skipped)) + ")")
    return kept, [f"{key}: {why}" for key, why in skipped]


def _refusal(scenario, point: Path) -> str | None:
    if scenario.faults:
        return (f"{point}: its scenario has faults ({len(scenario.faults)}), whose effect on the "
                "fabric the records do not keep")
    if scenario.kv_levels():
        return (f"{point}: KV priority levels (network.flow_policy {scenario.network.flow_policy}): "
                "the records do not keep each chunk's level")
    if packet_ecmp(scenario.network.ecmp) != "per-pair":
        return (f"{point}: network.ecmp {scenario.network.ecmp}: OVS's per-flow hash is not "
                "ns-3's, so the paths cannot be taken again")
    return None


def _cell_refusal(cell: Path, scenario, built) -> str | None:
    if not (cell / "transfers.csv").is_file():
        return "no transfers.csv"
    try:
        fidelity = read_json((cell / "fidelity.json"), object)
    except (OSError, ValueError):
        return "no readable fidelity.json (not an emulation run?)"
    if not isinstance(fidelity, dict):
        raise Unreplayable(f"{cell / 'fidelity.json'}: not a JSON object")
    if fidelity.get("verdict") != "faithful":
        return f"unfaithful ({'; '.join(map(str, fidelity.get('reasons') or ['flagged']))})"
    applied = fidelity.get("replica")
    if applied is not None and not isinstance(applied, dict):
        raise Unreplayable(f"{cell / 'fidelity.json'}: replica: not a JSON object")
    if not applied:
        return ("no applied replica recorded (made by code before runs recorded it, or on "
                "several machines): run it again")
    want = built(scenario)
    for field in sorted(set(applied) | set(want)):
        if applied.get(field) != want.get(field):
            return (f"its replica's {field} is {applied.get(field)}, ns-3's twin builds "
                    f"{want.get(field)} (another scale or code)")
    rows_of(cell)  # damaged records are refused by file and line before anything runs
    return None


# -- judging (pure but for reading the run folders) ------------------------------------------

def competitors(rows: Sequence[dict]) -> dict[str, int]:
    """Request -> how many other whole transfers of the run were in flight at its start on
    a link its shards cross."""
    whole = {str(w["request"]): w for w in model_errors.whole_transfers(rows)}
    hops: dict[str, set] = {}
    for r in rows:
        hops.setdefault(str(r["request"]), set()).update(path_hops(str(r.get("path") or "")))
    out = {}
    for request, w in whole.items():
        mine = hops.get(request, set())
        out[request] = sum(1 for other, o in whole.items() if other != request
                           and o["start"] <= w["start"] < o["end"] and mine & hops[other])
    return out


def _bucket(n: int) -> str:
    return next(label for lo, hi, label in COMPETITORS if lo <= n <= hi)


def judge(cells: dict[str, tuple[list[dict], list[dict], dict]]) -> dict:
    """cells: key -> (the emulation's transfers, ns-3's replay of them, the validity
    floors of the cell's scenario). The paired errors of whole transfers, the bias per
    tier and per competitors, and the timeouts shard by shard."""
    errors, above, units, tiers, crowd = [], [], [], {}, {}
    shards = {"n": 0, "both": 0, "emulation_only": 0, "ns3_only": 0, "neither": 0}
    lost = 0
    for key, (emu, ns3, floors) in sorted(cells.items()):
        done = [r for r in ns3 if r["end"] is not None]
        lost += len(ns3) - len(done)
        pairs, _ = model_errors.match_transfers(model_errors.whole_transfers(emu),
                                           model_errors.whole_transfers(done))
        near = competitors(emu)
        for p in pairs:
            errors.append(p.error)
            tiers.setdefault(str(p.tier), []).append(p.error)
            crowd.setdefault(_bucket(near.get(p.request, 0)), []).append(p.error)
            if validity.above_floor(p.tier, p.size_bytes, floors):
                above.append(p.error)
                units.append((key, p.request))
        theirs = {(str(r["request"]), int(r["shard"])): r for r in done}
        for r in emu:
            other = theirs.get((str(r["request"]), int(r["shard"])))
            if other is None or r.get("timeouts") in (None, ""):
                continue
            e, n = int(float(r["timeouts"])) > 0, int(other["timeouts"]) > 0
            shards["n"] += 1
            shards["both" if e and n else "emulation_only" if e else "ns3_only" if n
                   else "neither"] += 1
    if not errors:
        raise ValueError("no whole transfer ended on both engines")
    out = {"transfers": len(errors), "lost_on_ns3": lost,
           "above_floor": _intervals(above), "all": _intervals(errors),
           "by_tier": {t: model_errors.error_stats(v) for t, v in sorted(tiers.items())},
           "by_competitors": {label: model_errors.error_stats(crowd[label])
                              for _, _, label in COMPETITORS if label in crowd},
           "timeouts": {**shards, **_shares(shards)}}
    return out


def _intervals(errors: list[float]) -> dict:
    if not errors:
        return {"n": 0}
    return {"n": len(errors), **stats.error_intervals(errors),
            "bias": statistics.fmean(errors)}


def _shares(s: dict) -> dict:
    n = s["n"] or 1
    return {"emulation_share": (s["both"] + s["emulation_only"]) / n,
            "ns3_share": (s["both"] + s["ns3_only"]) / n,
            "one_engine_share": (s["emulation_only"] + s["ns3_only"]) / n}


def cell_floors(scenario) -> dict[int, dict]:
    return validity.floors(scenario)


def rows_of(cell: Path) -> list[dict]:
    return read_csv(cell / "transfers.csv")


# -- the whole command: check every folder, replay, judge, write -----------------------------

def replay_runs(folders: Sequence[Path], executor, out_root: Path | None,
                on_step=None, overrides: dict | None = None) -> tuple[dict, Path | None]:
    """Every folder checked first (Unreplayable names the first that cannot be), then
    every replayable cell on ns-3 on `executor`, judged; written to
    out_root/replay-ns3-<stamp>/ (replay.json, and ns-3's transfers.csv per cell) unless
    out_root is None. The emulation's own floor where two runs share a cell.
    `overrides`: ns-3's twin changed so (benchmarks/bench_twin.py takes its parts away)."""
    from testbed.ns3sim.program import checked_program
    from testbed.ns3sim.replayer import replay_cell, twin_replica

    exe = checked_program()
    built: dict[str, dict] = {}

    def twin(scenario) -> dict:
        key = scenario.model_dump_json()
        if key not in built:
            built[key] = twin_replica(scenario, exe)
        return built[key]

    runs = [(Path(f), *replayable(Path(f), twin)) for f in folders]
    tasks = [(str(cell.parent.parent / "scenario.yaml"), str(cell), overrides or {})
             for _, kept, _ in runs for _, cell in kept.values()]
    if on_step:
        on_step(f"ns-3 replays {len(tasks)} emulated runs' transfers")
    got, failed = {}, {}
    for task, rows in executor.map(replay_cell, tasks):
        (failed if isinstance(rows, Lost) else got)[Path(task[1])] = rows
    cells, per_run = {}, []
    for i, (folder, kept, skipped) in enumerate(runs):
        mine = {}
        for key, (scenario, cell) in kept.items():
            if cell in got:
                mine[key] = (rows_of(cell), got[cell], cell_floors(scenario))
                cells[f"{i}:{key}"] = mine[key]
            else:
                skipped.append(f"{key}: ns-3 could not replay it ({failed[cell].error})")
        per_run.append({"folder": str(emulation_run(folder)), "cells": sorted(mine),
                        "skipped": skipped, **(judge(mine) if mine else {})})
    if not cells:
        raise ValueError("ns-3 replayed no cell: " + "; ".join(
            f"{cell}: {lost.error}" for cell, lost in failed.items()))
    doc = {"engine": "ns3", "runs": per_run, "overall": judge(cells),
           "floor": _floor(runs, got)}
    return doc, _write(doc, runs, got, out_root) if out_root is not None else None


def _floor(runs, got: dict[Path, list[dict]]) -> dict | None:
    """Packets against packets over the runs of the first run's scenario that share its
    cells, and ns-3's replay error on those very transfers."""
    from testbed.validate.engines import repeat

    if len(runs) < 2:
        return None
    first = runs[0][1]
    name = {_identity(scenario) for scenario, _ in first.values()}
    same = [{k: c for k, (scenario, c) in kept.items() if _identity(scenario) in name}
            for _, kept, _ in runs]
    same = [s for s in same if s]
    if len(same) < 2:
        return None
    scenario = next(iter(first.values()))[0]
    replay = {k: got[c] for k, (_, c) in first.items() if c in got}
    replay = {k: [r for r in rows if r["end"] is not None] for k, rows in replay.items()}
    return repeat.packets_against_packets(same, cell_floors(scenario), replay)


def _identity(scenario) -> str:
    """A scenario but for how many seeds it ran and ns-3's settings (which the emulation
    never reads): two emulation runs of it share their cells."""
    return scenario.with_overrides({"seeds": 1, "ns3": {}}).model_dump_json()


def _write(doc: dict, runs, got: dict[Path, list[dict]], out_root: Path) -> Path:
    from testbed.records import atomic_write, stamp, write_csv, write_json

    folder = out_root / f"replay-ns3-{stamp()}"
    folder.mkdir(parents=True, exist_ok=False)
    atomic_write(folder / PARTIAL, "ns-3's replays being written\n")
    for i, (_, kept, _) in enumerate(runs):
        for key, (_, cell) in kept.items():
            if cell in got:
                rows = got[cell]
                write_csv(folder / "cells" / str(i) / key / "transfers.csv", rows,
                          list(rows[0]) if rows else ["request", "shard", "end"])
    write_json(folder / "replay.json", doc)
    (folder / PARTIAL).unlink()
    return folder
