"""The paper's Table V at packet level: NetKV-Full vs CLA* on ns-3 and in the flow model,
64 GPUs and up. Printed, never asserted.

Per fabric size (scenarios/exp7-scale-packets.yaml's sweep, or --pods): its seeds (each
its own trace segment) on ns-3 at the scenario's replica scale, every run a process on
every core (or --dask), and in the flow model as it predicts the cluster (fluid, no
calibration, ECMP as the packets hash it); paired by request as `testbed validate` pairs
them (validate/verdicts.point_claims): NetKV-Full's mean-TTFT gain over CLA* on each engine
with its bootstrap interval, the flow model minus ns-3, and each scheduler's mean TTFT with
the flow model's overestimate; beside the paper's figures (packet-level simulator vs flow
model, 64 and 128 GPUs). Each point's cost is printed; points stop when the next one's
projected cost (its GPUs x the last point's seconds per GPU-run) would pass --budget, and
what the rest would take here, on one 16-core server and on a Dask cluster of them is
printed in their place. Nothing here is fitted.

With --scales the first fabric runs at each replica scale instead (the emulation's 2e-4
makes a 100 Gbit/s link 20 Mbit/s; at 1e-2 it is 1 Gbit/s): how the gains and the flow
model's error move with the scale a verdict was taken at. Per point also the flow model's
whole-transfer error against ns-3: replaying ns-3's own transfers, and both engines
deciding.

With --rounds each fabric size is instead `testbed validate --packets ns3` on that point:
the flow model calibrated on ns-3's probes of that fabric, seeds added in rounds (each its
own trace segment, then draws of them) until NetKV-Full vs CLA* is conclusive or the
point's share of --budget is spent (what is left of it over the points still to run,
smallest fabric first, so a point that settles early leaves its time to the next). Each
validation folder stays under --out. The demo's ladder of scales with its verdicts is
benchmarks/bench_ladder.py.

Run: .venv/bin/python benchmarks/bench_table5.py [--pods 2 4 8] [--budget 60m]
     [--scales 2e-4 1e-3 1e-2] [--rounds --out DIR]
     [--seeds 5] [--jobs 0] [--dask HOST:PORT] [--scenario FILE] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

import yaml

from testbed.api import load_scenario, validate
from testbed.cli.options import Duration
from testbed.records import read_csv
from testbed.runner import run_simulated
from testbed.sweep import Executor
from testbed.validate.comparison.sections import cells_of, per_point
from testbed.validate.comparison.verdicts import point_claims
from testbed.validate.engines.flow_match import flow_scenario
from testbed.validate.engines.flow_replay import replay_cells, whole_pairs
from testbed.validate.engines.ns3_cost import PlanRefused
from testbed.validate.judging.model_errors import error_summary
from testbed.validate.pipelines.ns3_pipeline import for_ns3
from testbed.workloads.build import segments_available

ROOT = Path(__file__).resolve().parents[1]
# NetKV paper, Table V: packet-level simulator vs flow model at 64 and 128 GPUs
PAPER = {64: {"packet_gain": -0.070, "flow_gain": -0.110},
         128: {"packet_gain": -0.074, "flow_gain": -0.136}}
PAPER_TTFT_OVERESTIMATE = (0.09, 0.13)
SERVER_CORES = 16


def _pct(iv: dict) -> str:
    if iv["low"] != iv["low"]:
        return f"{100 * iv['point']:+.1f}%"
    return f"{100 * iv['point']:+.1f}% [{100 * iv['low']:+.1f}, {100 * iv['high']:+.1f}]"


def _minutes(s: float) -> str:
    return f"{s / 60:.1f} min" if s < 5400 else f"{s / 3600:.1f} h"


def point(cell, seeds: int, executor, work: Path) -> dict:
    """One fabric size on both engines, judged as validate judges a claim."""
    most = segments_available(cell)
    if most is not None and most < seeds:
        seeds = max(1, most)
    replica = for_ns3(cell.with_overrides({"seeds": seeds,
                                               "workload.seed_segments": True}))
    t = time.monotonic()
    ns3 = run_simulated(replica, work, executor=executor, engine="ns3").folder
    ns3_s = time.monotonic() - t
    t = time.monotonic()
    flow = run_simulated(flow_scenario(replica), work).folder
    flow_s = time.monotonic() - t
    ns3_cells, flow_cells = cells_of(ns3), cells_of(flow)
    twin = flow_scenario(replica)
    transfers = {"replay": error_summary(whole_pairs(ns3_cells, replay_cells(twin, ns3_cells,
                                                                             None))),
                 "both": error_summary(whole_pairs(ns3_cells, {
                     k: read_csv(c / "transfers.csv") for k, c in flow_cells.items()}))}
    claims = point_claims(ns3_cells, flow_cells)["000-base"]
    gain = next(c for c in claims["claims"] if c["scheduler"] == "netkv-full"
                and c["baseline"] == "cla" and c["metric"] == "ttft_mean")
    means = {e: per_point(cells)["000-base"] for e, cells in (("ns3", ns3_cells),
                                                                ("flow", flow_cells))}
    return {"gpus": cell.cluster.spec().n_gpus, "scale": replica.emulation.scale,
            "seeds": seeds, "runs": len(ns3_cells), "n": claims["n"], "gain": gain,
            "means": means, "transfers": transfers, "ns3_s": ns3_s, "flow_s": flow_s}


def show(p: dict) -> None:
    g = p["gain"]
    print(f"\n{p['gpus']} GPUs, scale {p['scale']:g}: {p['seeds']} seed(s), {p['runs']} ns-3 runs in "
          f"{p['ns3_s']:.0f} s ({p['ns3_s'] / p['runs']:.1f} s a run, wall), flow model "
          f"{p['flow_s']:.1f} s; {p['n']} requests paired")
    print(f"  NetKV-Full vs CLA*, mean TTFT: ns-3 {_pct(g['packets'])}, flow "
          f"{_pct(g['flow'])}; flow - ns-3 {100 * g['difference']['point']:+.1f} pts "
          f"[{100 * g['difference']['low']:+.1f}, {100 * g['difference']['high']:+.1f}]: "
          f"{g['verdict']}; on ns-3 the gain {g['on_packets']}")
    for sched in ("cla", "netkv-full"):
        a = p["means"]["ns3"][sched]["ttft_mean_ms"]
        b = p["means"]["flow"][sched]["ttft_mean_ms"]
        print(f"  {sched:>10} mean TTFT: ns-3 {a:.0f} ms, flow {b:.0f} ms "
              f"(flow {100 * (b / a - 1):+.1f}%)")
    for which, words in (("replay", "replayed (ns-3's own transfers)"),
                         ("both", "both engines deciding")):
        t = p["transfers"][which]
        if t["n"]:
            print(f"  whole transfers, flow vs ns-3, {words}: n={t['n']}, median "
                  f"{100 * t['median_abs_error']:.1f}%, p90 {100 * t['p90_abs_error']:.1f}%, "
                  f"bias {100 * t['mean_error']:+.1f}%")
    paper = PAPER.get(p["gpus"])
    if paper:
        print(f"  paper (packet-level simulator vs flow model): gain "
              f"{100 * paper['packet_gain']:+.1f}% vs {100 * paper['flow_gain']:+.1f}%; "
              f"flow mean TTFT +{100 * PAPER_TTFT_OVERESTIMATE[0]:.0f} to "
              f"+{100 * PAPER_TTFT_OVERESTIMATE[1]:.0f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "exp7-scale-packets.yaml"))
    ap.add_argument("--pods", type=int, nargs="*", default=None,
                    help="fabric sizes in pods (32 GPUs each); default: the sweep's")
    ap.add_argument("--scales", type=float, nargs="*", default=None,
                    help="instead of fabric sizes: the first one at each of these replica "
                         "scales on ns-3 (e.g. 2e-4 1e-3 1e-2)")
    ap.add_argument("--seeds", type=int, default=None, help="default: the scenario's")
    ap.add_argument("--budget", default="60m", help="wall budget, e.g. 60m or 3600s")
    ap.add_argument("--jobs", type=int, default=0, help="local processes (0: one per core)")
    ap.add_argument("--dask", default=None, help="a Dask scheduler's address")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--rounds", action="store_true",
                    help="each point through validate --packets ns3's rounds until conclusive")
    ap.add_argument("--out", type=Path, default=Path("results/table5"),
                    help="--rounds: where the validation folders go")
    args = ap.parse_args()
    budget = Duration().convert(args.budget, None, None)
    overrides = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.sets)}
    sc = load_scenario(args.scenario, overrides)
    cells = [cell for _, cell in sc.points()]
    if args.pods:
        cells = [sc.with_overrides({"cluster.pods": n}, keep_sweep=False) for n in args.pods]
    if args.scales:  # the first fabric at each replica scale
        cells = [cells[0].with_overrides({"ns3.scale": x}) for x in args.scales]
    if args.rounds:
        rounds(cells, budget, args)
        return
    seeds = args.seeds or sc.seeds
    cores = args.jobs or os.cpu_count() or 1
    print(f"Table V at packet level: {sc.name}, {seeds} seed(s) a point, ns-3 scale "
          f"{for_ns3(cells[0]).emulation.scale:g}, {cores} local process(es); budget "
          f"{_minutes(budget)}")
    started, done = time.monotonic(), []
    executor = Executor.dask(args.dask) if args.dask else Executor.local(args.jobs)
    with executor, tempfile.TemporaryDirectory() as tmp:
        for i, cell in enumerate(cells):
            gpus = cell.cluster.spec().n_gpus
            if done:  # a run's cost grows with the fabric as the last two points say
                guess = _cost(done, gpus, cores) * done[-1]["runs"] / cores
                left = budget - (time.monotonic() - started)
                if guess > left:
                    rest = [c.cluster.spec().n_gpus for c in cells[i:]]
                    print(f"\nstopped before {gpus} GPUs: about {_minutes(guess)} projected, "
                          f"{_minutes(max(0.0, left))} of the budget left")
                    _projection(done, rest, cores)
                    break
            p = point(cell, seeds, executor, Path(tmp))
            done.append(p)
            show(p)
    print(f"\nwall: {_minutes(time.monotonic() - started)}")


def rounds(cells, budget: float, args) -> None:
    """Every point validated on ns-3 in rounds, the budget shared as the points go."""
    print(f"Table V through validate's rounds on ns-3: {len(cells)} point(s), budget "
          f"{_minutes(budget)}")
    started, rows = time.monotonic(), []
    for i, cell in enumerate(cells):
        gpus = cell.cluster.spec().n_gpus
        share = (budget - (time.monotonic() - started)) / (len(cells) - i)
        print(f"\n{gpus} GPUs: budget {_minutes(share)}", flush=True)
        where = args.out / f"{gpus}-gpus"
        done = sorted(where.glob("*/comparison.json"), key=lambda f: f.stat().st_mtime)
        if done:  # validated before: read, not run again
            wall = json.loads((done[-1].parent / "wall.json").read_text())["total_s"]
            rows.append((gpus, json.loads(done[-1].read_text()), wall))
            print("  read from", done[-1].parent)
            continue
        t = time.monotonic()
        try:  # the rounds add seeds: the scenario's own count is not asked of the trace
            result = validate(cell.with_overrides({"seeds": 1}), where, packets="ns3",
                              budget_s=share, jobs=args.jobs, dask=args.dask, progress=True)
        except PlanRefused as refused:
            print(f"  refused: {refused}")
            rows.append((gpus, None, time.monotonic() - t))
            continue
        rows.append((gpus, result.comparison, time.monotonic() - t))
    print("\n| GPUs | seeds | gain on ns-3 | gain, flow model | flow - ns-3 (pts, with the draws) "
          "| verdict | wall |")
    print("|---|---|---|---|---|---|---|")
    for gpus, doc, wall in rows:
        if doc is None:
            print(f"| {gpus} | refused | | | | | {_minutes(wall)} |")
            continue
        (claim,) = [c for point in doc["claims"].values() for c in point["claims"]
                    if c["scheduler"] == "netkv-full" and c["baseline"] == "cla"
                    and c["metric"] == "ttft_mean"]
        diff = claim.get("difference_with_draws") or claim["difference"]
        print(f"| {gpus} | {doc['judged']['seeds']} | {_pct(claim['packets'])} | "
              f"{_pct(claim['flow'])} | {100 * diff['point']:+.1f} [{100 * diff['low']:+.1f}, "
              f"{100 * diff['high']:+.1f}] | {claim['verdict']} | {_minutes(wall)} |")
    print(f"\nwall: {_minutes(time.monotonic() - started)}")


def _run_s(p: dict, cores: int) -> float:
    """CPU seconds of one ns-3 run at point p (its runs shared the cores)."""
    return p["ns3_s"] * min(cores, p["runs"]) / p["runs"]


def _exponent(done: list[dict], cores: int) -> float:
    """How a run's cost grows with GPUs: the last two points' power law (1 from one)."""
    if len(done) < 2 or done[-1]["gpus"] == done[-2]["gpus"]:
        return 1.0
    a, b = done[-2], done[-1]
    return math.log(_run_s(b, cores) / _run_s(a, cores)) / math.log(b["gpus"] / a["gpus"])


def _cost(done: list[dict], gpus: int, cores: int = 1) -> float:
    """Projected CPU seconds of one run at `gpus`, from the last point."""
    last = done[-1]
    return _run_s(last, cores) * (gpus / last["gpus"]) ** _exponent(done, cores)


def _projection(done: list[dict], rest: list[int], cores: int) -> None:
    """What the points not run would take (their runs are independent: servers divide
    the wall while there are runs to go round)."""
    runs = done[-1]["runs"]
    print(f"  (a run's cost grows as GPUs^{_exponent(done, cores):.2f}, from the last points)")
    for gpus in rest:
        one = _cost(done, gpus, cores)
        print(f"  {gpus} GPUs: ~{_minutes(one * runs / cores)} here, "
              f"~{_minutes(one * runs / min(SERVER_CORES, runs))} on one {SERVER_CORES}-core "
              f"server, ~{_minutes(one)} on a Dask cluster of "
              f"{-(-runs // SERVER_CORES)} such servers (a run a core)")


if __name__ == "__main__":
    main()
