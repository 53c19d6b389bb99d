"""The ns-3 engine's speed against a floor built from ns-3's stock parts. Printed, never
asserted.

One cell of the scenario (the demo by default) runs on the engine's program
(testbed/ns3sim/kvnet); its KV shards, at their recorded starts and sizes on the wire,
then run on benchmarks/ns3_reference/reference.cc: the same fabric (links, rates, delays,
queue depths, from the engine's own set-up lines) built from stock parts only
(point-to-point links, FifoQueueDisc, ns-3's CUBIC, BulkSend). Both count every packet a
device put on a wire (hosts and switch hops) and the CPU they spent, side by side in one
run; the ratio of packets per CPU-second says what the engine's own parts cost on top
of ns-3's. With --perf the engine's program runs under `perf record` and the top symbols
are printed (where its time goes).

The reference routes by ns-3's global routing over one shortest path per pair (stock
ns-3 has no per-flow ECMP; its per-packet random ECMP would reorder every shard) and
sends without the engine's Linux sender (ns3.twin) and framing: it is the floor of
ns-3's own per-packet work on these packets, not a second model of them.

Run: .venv/bin/python benchmarks/bench_ns3_floor.py [--scenario scenarios/validate.yaml]
     [--scheduler netkv-full] [--seed 1] [--set FIELD=VALUE ...] [--perf]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from testbed.api import load_scenario
from testbed.cells import Task
from testbed.ns3sim.ns3_fabric import Ns3Fabric
from testbed.ns3sim.program import build_dir, compile_program, program_path, wheel
from testbed.runner import run_task

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "benchmarks" / "ns3_reference" / "reference.cc"
MODULES = ("core", "network", "internet", "point-to-point", "traffic-control", "applications")


def reference_program() -> Path:
    """The stock reference, compiled once per source and ns-3 with the engine's flags."""
    _, version = wheel()
    key = hashlib.sha256(SOURCE.read_bytes() + version.encode()).hexdigest()[:16]
    target = build_dir() / f"reference-{key}"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        compile_program(SOURCE, target, MODULES)
    return target


def children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def engine_run(scenario, scheduler: str, seed: int) -> dict:
    """One cell on the engine's program: its packets, its CPU (the child's) and its
    transfers."""
    point, cell = scenario.points()[0]
    before, wall = children_cpu(), time.monotonic()
    out = run_task(Task(0, point, cell, scheduler, seed, engine="ns3"))
    cpu, wall = children_cpu() - before, time.monotonic() - wall
    packets = out["files"]["ns3.json"]["packets"]
    return {"cell": cell, "transfers": out["transfers"], "cpu_s": cpu, "wall_s": wall,
            "packets": packets["hosts"] + packets["hops"], "hosts": packets["hosts"],
            "summary_cpu_s": out["summary"].get("engine_ns3_cpu_s")}


def reference_input(cell, seed: int, transfers: list[dict]) -> str:
    """The engine's own set-up lines (fabric, TCP settings) and a flow per KV shard, its
    bytes on the replica's wire."""
    fabric = Ns3Fabric(cell, seed)
    ids = fabric.ids
    lines = [ln for ln in fabric.setup_lines() if not ln.startswith("route ")]
    for t in transfers:
        wire = max(1, round(float(t["bytes"]) * fabric.scale))
        lines.append(f"flow {ids[t['src']]} {ids[t['dst']]} {wire} "
                     f"{round(float(t['start']) * 1e9)}")
    return "\n".join(lines) + "\n"


def reference_run(exe: Path, text: str) -> dict:
    before, wall = children_cpu(), time.monotonic()
    done = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
    cpu, wall = children_cpu() - before, time.monotonic() - wall
    figures = dict(kv.split("=", 1) for kv in done.stdout.split())
    out = {k: float(v) for k, v in figures.items()}
    out.update(cpu_s=cpu, wall_s=wall, packets=out["hosts_tx"] + out["hops_tx"])
    return out


def perf_top(scenario, scheduler: str, seed: int, folder: Path, top: int = 25) -> str:
    """The engine's program under `perf record` (a wrapper named by $NETKV_NS3_PROGRAM):
    its top symbols by self time."""
    if shutil.which("perf") is None:
        return "perf is not installed (apt-get install linux-perf)"
    data = folder / "perf.data"
    wrapper = folder / "kvnet-perf"
    wrapper.write_text(f"#!/bin/sh\nexec perf record -q -F 1999 -o {data} -- "
                       f"{program_path()} \"$@\"\n")
    wrapper.chmod(0o755)
    os.environ["NETKV_NS3_PROGRAM"] = str(wrapper)
    try:
        engine_run(scenario, scheduler, seed)
    finally:
        del os.environ["NETKV_NS3_PROGRAM"]
    out = []
    for sort, limit in (("dso", "0.5"), ("dso,symbol", "0.7")):
        report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--stdio",
                                 "--sort", sort, "-g", "none", "--percent-limit", limit],
                                capture_output=True, text=True)
        rows = [ln.rstrip()[:110] for ln in report.stdout.splitlines()
                if ln.strip() and not ln.startswith("#")]
        out += [f"by {sort}:", *rows[:top], ""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "validate.yaml"))
    parser.add_argument("--scheduler", default="netkv-full")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--perf", action="store_true", help="profile the engine's program")
    args = parser.parse_args()
    overrides = dict(s.split("=", 1) for s in args.set)
    scenario = load_scenario(args.scenario, overrides, seeds=1)
    exe = reference_program()
    engine = engine_run(scenario, args.scheduler, args.seed)
    ref = reference_run(exe, reference_input(engine["cell"], args.seed, engine["transfers"]))
    e_rate, r_rate = engine["packets"] / engine["cpu_s"], ref["packets"] / ref["cpu_s"]
    r_run = ref["packets"] / max(ref["run_cpu_s"], 1e-9)
    print(f"{scenario.name}: one cell ({args.scheduler}, seed {args.seed}), "
          f"{len(engine['transfers'])} KV shards, scale {Ns3Fabric(engine['cell'], 1).scale:g}")
    print(f"{'':28} {'packets':>10} {'CPU s':>8} {'packets/CPU-s':>14}")
    print(f"{'engine (kvnet)':28} {engine['packets']:>10,.0f} {engine['cpu_s']:>8.2f} "
          f"{e_rate:>14,.0f}")
    print(f"{'stock reference':28} {ref['packets']:>10,.0f} {ref['cpu_s']:>8.2f} "
          f"{r_rate:>14,.0f}   (run alone: {r_run:,.0f}; build {ref['build_cpu_s']:.2f} s)")
    print(f"engine / reference, packets per CPU-second: {e_rate / r_rate:.2f}; the reference "
          f"delivered {ref['received'] / max(ref['bytes'], 1):.0%} of its bytes by "
          f"{ref['modelled_s']:.1f} modelled s")
    if args.perf:
        with tempfile.TemporaryDirectory() as tmp:
            print("\nthe engine's program under perf (self time):")
            print(perf_top(scenario, args.scheduler, args.seed, Path(tmp)))


if __name__ == "__main__":
    sys.exit(main())
