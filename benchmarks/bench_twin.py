"""ns-3's twin of the emulation, part by part: printed, never asserted.

ns-3 with its stock parts (ns3.twin: []) and then with each part of the twin added in turn
(TSQ, slow-start restart, Linux's RTO, the tail loss probe, RACK, the emulation's framing,
ACK marking, the emulation's frame on the wire, HTB's shaping), judged two ways in one run:

- replays: the emulation runs given (FOLDERS: emulation run folders, or validations
  holding one) replayed on each variant and judged transfer by transfer as `testbed
  replay` judges them: median and p90 |error| of whole transfers above the validity floor
  with intervals, the bias, the share of shards that waited out a retransmission timeout
  on each engine and on one engine only; with two runs of one cell, the emulation's own
  floor under the table, and ns-3's: the full twin's replay against itself with every
  shard started up to one frame's time later (`ns3.start_jitter_us`), how near a
  deterministic twin can come to chaotic packets;
- probes: `testbed calibrate`'s lone and competing transfers (scenarios/validate.yaml's
  fabric unless --scenario) on each variant against the emulation's, measured first in the
  same run as root, or read from --emulation-probes FILE (written there when measured):
  the median |difference| of the lone transfers and of the competing sets' slowest.

Run: [sudo] .venv/bin/python benchmarks/bench_twin.py FOLDER... [--jobs 0]
     [--emulation-probes FILE] [--scenario scenarios/validate.yaml] [--only replay|probes]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from testbed.ns3sim.program import program_path
from testbed.ns3sim.replayer import emulation_twin
from testbed.records import read_csv
from testbed.scenario import load_scenario
from testbed.scenario.ns3 import TWIN_BEHAVIOURS
from testbed.sweep import Executor
from testbed.validate.engines.ns3_probes import probe_tiers
from testbed.validate.engines.ns3_replay import replay_runs
from testbed.validate.engines.repeat import jittered
from testbed.validate.judging import model_errors, stats
from testbed.validate.judging.words import replay_lines


def variants() -> list[tuple[str, list[str]]]:
    out = [("stock ns-3", [])]
    for k in range(1, len(TWIN_BEHAVIOURS) + 1):
        out.append((f"+ {TWIN_BEHAVIOURS[k - 1]}", list(TWIN_BEHAVIOURS[:k])))
    return out


def emulation_probes(sc, cache: Path | None) -> dict | None:
    if cache is not None and cache.exists():
        return json.loads(cache.read_text())
    if os.geteuid() != 0:
        print("emulation probes: skipped (needs root, or --emulation-probes FILE)")
        return None
    from testbed.validate.engines.fabric_probes import probe_fabric

    tiers = probe_fabric(sc, print)
    if cache is not None:
        cache.write_text(json.dumps(tiers))
    return tiers


def probe_gaps(emu: dict, got: dict) -> tuple[float, float]:
    """Median |ns-3 - emulation| / emulation of the lone transfers and of each competing
    set's slowest."""
    lone, comp = [], []
    for tier, doc in got.items():
        for k, s in enumerate(doc["samples"]):
            e = emu[tier]["samples"][k]["seconds"]
            lone.append(abs(s["seconds"] - e) / e)
        for k, c in enumerate(doc["competing"]):
            e = max(emu[tier]["competing"][k]["seconds"])
            comp.append(abs(max(c["seconds"]) - e) / e)
    return statistics.median(lone), statistics.median(comp)


def ns3_floor(folders: list[Path], pool) -> str:
    """ns-3's twin replaying the runs twice, the second time with each shard's start
    perturbed by up to one frame's time: its whole transfers against each other."""
    with tempfile.TemporaryDirectory() as tmp:
        sc = load_scenario(next(Path(folders[0]).glob("**/scenario.yaml")))
        frame_us = jittered(sc, 1).ns3.start_jitter_us
        outs = [replay_runs(folders, pool, Path(tmp) / name, overrides=over)[1]
                for name, over in (("plain", {}), ("jittered", {
                    "ns3.start_jitter_us": frame_us, "ns3.jitter_seed": 1}))]
        errors = []
        for plain in sorted(outs[0].glob("cells/**/transfers.csv")):
            other = outs[1] / plain.relative_to(outs[0])
            a, b = (model_errors.whole_transfers(
                [r for r in read_csv(f) if r["end"] not in (None, "")]) for f in (plain, other))
            pairs, _ = model_errors.match_transfers(a, b)
            errors += [p.error for p in pairs]
    got = stats.error_intervals(errors)
    return (f"ns-3 against itself, each shard up to {frame_us:.0f} modelled us later "
            f"(n={len(errors)}): median |error| {pct(got['median_abs_error']['point'])}, "
            f"p90 {pct(got['p90_abs_error']['point'])}")


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--scenario", default="scenarios/validate.yaml")
    ap.add_argument("--emulation-probes", type=Path, default=None, metavar="FILE")
    ap.add_argument("--only", choices=("replay", "probes"))
    args = ap.parse_args()
    exe = program_path()
    sc = load_scenario(args.scenario)
    emu = emulation_probes(sc, args.emulation_probes) if args.only != "replay" else None
    rows, last = [], None
    with Executor.local(args.jobs) as pool:
        for name, twin in variants():
            row = [name]
            if args.folders and args.only != "probes":
                doc, _ = replay_runs(args.folders, pool, None, overrides={"ns3.twin": twin})
                a, t = doc["overall"]["above_floor"], doc["overall"]["timeouts"]
                row += [f"{pct(a['median_abs_error']['point'])} [{pct(a['median_abs_error']['low'])}, "
                        f"{pct(a['median_abs_error']['high'])}]",
                        f"{pct(a['p90_abs_error']['point'])} [{pct(a['p90_abs_error']['low'])}, "
                        f"{pct(a['p90_abs_error']['high'])}]", f"{100 * a['bias']:+.1f}%",
                        f"{pct(t['emulation_share'])} / {pct(t['ns3_share'])} / "
                        f"{pct(t['one_engine_share'])}"]
                last = doc
            if emu is not None:
                twin_sc = emulation_twin(sc).with_overrides({"ns3.twin": twin})
                lone, comp = probe_gaps(emu, probe_tiers(twin_sc, exe))
                row += [pct(lone), pct(comp)]
            rows.append(row)
            print(" | ".join(row), flush=True)
    head = ["ns-3"]
    if args.folders and args.only != "probes":
        head += ["replay median |error|", "p90", "bias", "timeouts: emulation / ns-3 / one only"]
    if emu is not None:
        head += ["probes: lone", "competing"]
    print("\n| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if last is not None:
        print("\nthe full twin, as `testbed replay` prints it:")
        print("\n".join(replay_lines(last)))
        with Executor.local(args.jobs) as pool:
            print(ns3_floor(args.folders, pool))


if __name__ == "__main__":
    main()
