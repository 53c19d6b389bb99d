"""Fabrics side by side (root, Open vSwitch): requests judged per wall-minute, K=1 vs K>1,
measured in one run on this machine. Figures, never assertions.

The same scenario (the validation scenario's workload on the paper's fat-tree, N seeds,
each its own trace segment) is emulated once per K in --fabrics. Per K it prints the wall
time, the runs the fidelity monitor passed, the requests measured (inside the window) per
wall-minute, and the judged ones: those of seeds whose every run was faithful, the only
ones a verdict uses. K above what the cores carry shows up as unfaithful runs (CPU-bound),
not as speed: on 2 cores K=2 finishes sooner and judges nothing.

Run: sudo .venv/bin/python benchmarks/bench_lanes.py [--fabrics 1,2|1,auto] [--seeds 2]
     [--dilation 2] [--measure 12] [--scenario scenarios/validate.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from testbed.api import emulate
from testbed.cli.common import handle_signals
from testbed.records import read_csv
from testbed.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def measure(scenario, fabrics: int | str, out: Path) -> dict:
    t = time.monotonic()
    run = emulate(scenario, out, fabrics=fabrics)
    wall = time.monotonic() - t
    fidelity = json.loads((run.folder / "fidelity.json").read_text())["runs"]
    faithful_runs = sum(r["verdict"] == "faithful" for r in fidelity)
    bad_seeds = {r["cell"].rsplit("/", 1)[1] for r in fidelity if r["verdict"] != "faithful"}
    measured = judged = 0
    for requests in sorted((run.folder / "cells").glob("*/*/seed*/requests.csv")):
        rows = [r for r in read_csv(requests) if str(r.get("measured")) == "True"]
        measured += len(rows)
        if requests.parent.name not in bad_seeds:
            judged += len(rows)
    used = max((len(list(p.glob("lane*"))) for p in (run.folder / "cells").glob("*/lanes")),
               default=1)
    return {"fabrics": fabrics if fabrics != "auto" else f"auto ({used})",
            "wall_s": wall, "runs": len(fidelity),
            "faithful": faithful_runs, "measured": measured, "judged": judged,
            "measured_per_min": 60.0 * measured / wall, "judged_per_min": 60.0 * judged / wall,
            "folder": str(run.folder)}


def main() -> None:
    handle_signals()  # SIGTERM tears the fabric down as Ctrl-C does
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "validate.yaml"))
    ap.add_argument("--fabrics", default="1,2",
                    help="comma-separated K values, or auto (sized from the K=1 run before it)")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--dilation", type=float, default=2.0)
    ap.add_argument("--measure", type=float, default=12.0, help="measurement window, s")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces, Open vSwitch)")
    scenario = load_scenario(args.scenario, {
        "seeds": args.seeds, "workload.seed_segments": True,
        "workload.measure_s": args.measure, "emulation.time_dilation": args.dilation})
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-lanes-"))
    rows = [measure(scenario, k if k == "auto" else int(k), out)
            for k in args.fabrics.split(",")]
    print(f"\n{scenario.name}: {args.seeds} seeds x {len(scenario.schedulers)} schedulers, "
          f"{args.measure:g} s window, dilation {args.dilation:g}, {os.cpu_count()} cores")
    print("| K | wall (s) | faithful runs | measured req | judged req | measured/min | "
          "judged/min |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['fabrics']} | {r['wall_s']:.0f} | {r['faithful']}/{r['runs']} | "
              f"{r['measured']} | {r['judged']} | {r['measured_per_min']:.0f} | "
              f"{r['judged_per_min']:.0f} |")
    base = rows[0]
    for r in rows[1:]:
        print(f"K={r['fabrics']} vs K={base['fabrics']}: wall x{r['wall_s'] / base['wall_s']:.2f}, "
              f"judged/min x{r['judged_per_min'] / max(base['judged_per_min'], 1e-9):.2f}")
    print(f"folders under {out}")


if __name__ == "__main__":
    main()
