"""The demo's verdict up the scale ladder: its claims and the flow model's per-transfer
error at each replica scale, under Linux's TCP and a datacenter profile, and whether the
two finest rungs agree. Printed, never asserted.

Each rung is `testbed validate SCENARIO --packets ns3 --set ns3.scale=S --budget B`: ns-3's
probes at that scale calibrate the flow model (its TCP terms fitted per rung from that
rung's probes, never from a workload), seeds are added in rounds until the three mean-TTFT
claims are conclusive or the budget is spent, and a rung whose first round alone would not
fit the budget is refused before it starts (its estimate printed). A rung already in
--out is read, not run again, so a long ladder can be bought a rung at a time.

Profiles (--profiles):
  linux       the emulation's Linux settings: CUBIC, a 200 ms RTO floor, 40 ms delayed ACK
  datacenter  DCTCP with ECN marking at every egress's KV queue (ns-3's default threshold,
              a quarter of the shortest queue), a 10 ms RTO floor and no delayed ACKs:
              datacenters lower Linux's WAN floor with the route's rto_min, and with it
              turn on the route's quickack, since a floor under the 40 ms delayed-ACK
              timer makes every one-segment window wait out a spurious timeout (measured:
              a lone 2 GB tier-1 transfer at 2e-4 took 0.8-1.2 s instead of 0.17 s, and
              half of the demo's shards timed out at 1e-3)
  roce        the paper's lossless fabric: RDMA writes under DCQCN with PFC (docs/ns3.md);
              read at 1e-2 (the replica's DCQCN keeps the real one's packets and times
              slowed by 1/scale at any rung, but TCP's background is coarse below it)

Per profile the two finest rungs that ran are compared claim by claim
(testbed/validate/judging/ladder.py): the packets' gain and the claim (flow minus packets)
each as the interval of their change, agree when inside the 5-point band. Then what a
plan of the seeds the finest rung took (or --seeds) would cost at each --project scale on
2 cores, a 16-core server and a Dask cluster of --cluster of them (ns-3's cost estimate,
validate/engines/ns3_cost.py: linear in the window and the scale).

Run: .venv/bin/python benchmarks/bench_ladder.py [--scales 2e-4,1e-3,1e-2]
     [--profiles linux,datacenter] [--budget 30m] [--out DIR] [--jobs 0] [--dask HOST:PORT]
     [--project 1e-1,1] [--seeds N] [--cluster 8] [--read] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from testbed.api import load_scenario, validate
from testbed.cli.options import Duration
from testbed.validate.engines.ns3_cost import PlanRefused, first_round
from testbed.validate.judging.claims import PRIMARY
from testbed.validate.judging.ladder import interval, ladder_steps, with_packet_draws
from testbed.validate.pipelines.ns3_pipeline import for_ns3

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {"linux": {},
            "datacenter": {"ns3.transport": "dctcp", "ns3.rto_min_ms": 10,
                           "ns3.delayed_ack_ms": 0},
            "roce": {"ns3.transport": "roce"}}
SERVER_CORES = 16


def _time(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _pts(iv) -> str:
    if iv.low != iv.low:
        return f"{100 * iv.point:+.1f}"
    return f"{100 * iv.point:+.1f} [{100 * iv.low:+.1f}, {100 * iv.high:+.1f}]"


def latest(folder: Path) -> Path | None:
    done = sorted(folder.glob("*/comparison.json"), key=lambda p: p.stat().st_mtime)
    return done[-1].parent if done else None


def rung(folder: Path) -> dict:
    """A validation folder's figures: seeds, cost, each mean-TTFT claim, transfers."""
    doc = json.loads((folder / "comparison.json").read_text())
    wall = json.loads((folder / "wall.json").read_text()) if (folder / "wall.json").exists() \
        else {}
    seeds = int(doc["judged"]["seeds"])
    claims = {}
    for point, judged in doc["claims"].items():
        spreads = (doc.get("trajectory") or {}).get(point, {})
        for c in judged["claims"]:
            if c["metric"] != PRIMARY:
                continue
            name = f"{c['scheduler']} vs {c['baseline']}"
            sd = (spreads.get(name) or {}).get("sd", math.nan)
            claims[name] = {"packets gain": with_packet_draws(interval(c["packets"]), sd, seeds),
                            "flow - packets": interval(c.get("difference_with_draws")
                                                       or c["difference"]),
                            "verdict": c["verdict"]}
    targets = doc["targets"]
    calibration = json.loads((folder / "calibration.json").read_text())
    tcp = calibration.get("tcp") or {}
    fitted = {"capacity": calibration.get("capacity_factor", {}),
              **{k: tcp.get(k) for k in ("shard_spread", "contention_idle", "join_stall_s")}}
    return {"folder": str(folder), "seeds": seeds, "runs": targets["runs"], "fitted": fitted,
            "wall_s": wall.get("total_s", math.nan), "phases": wall.get("phases", {}),
            "claims": claims,
            "transfers": {"median": targets["replay_median_abs_transfer_error"],
                          "median_ci": targets["replay_median_ci"],
                          "p90": targets["replay_p90_abs_transfer_error"],
                          "p90_ci": targets["replay_p90_ci"],
                          "both": targets["engines_median_abs_transfer_error"]}}


def climb(args, overrides: dict) -> dict[str, dict[float, dict]]:
    out: dict[str, dict[float, dict]] = {}
    for profile in args.profiles:
        for scale in args.scales:
            where = args.out / f"{profile}-{scale:g}"
            folder = latest(where)
            if folder is None and args.read:
                continue
            if folder is None:
                scenario = load_scenario(args.scenario, {**overrides, **PROFILES[profile],
                                                         "ns3.scale": scale})
                print(f"\n{profile} at ns3.scale {scale:g}: running (budget "
                      f"{_time(args.budget)})", flush=True)
                try:
                    folder = validate(scenario, where, packets="ns3", budget_s=args.budget,
                                      jobs=args.jobs, dask=args.dask, progress=True).folder
                except PlanRefused as refused:
                    print(f"  refused: {refused}")
                    out.setdefault(profile, {})[scale] = {"refused": str(refused)}
                    continue
            out.setdefault(profile, {})[scale] = rung(folder)
    return out


def show(ladder: dict[str, dict[float, dict]]) -> None:
    for profile, rungs in ladder.items():
        print(f"\n## {profile}")
        for scale, r in sorted(rungs.items()):
            if "refused" in r:
                print(f"\nns3.scale {scale:g}: refused before it started")
                continue
            t = r["transfers"]
            print(f"\nns3.scale {scale:g}: {r['seeds']} seeds, {r['runs']} runs, "
                  f"{_time(r['wall_s'])} wall; whole transfers (replay) median "
                  f"{100 * t['median']:.1f}% p90 {100 * t['p90']:.1f}%, both engines "
                  f"deciding median {100 * t['both']:.1f}%")
            f = r["fitted"]
            print(f"  fitted on this rung's probes: capacity "
                  f"{'/'.join(f'{v:.3f}' for v in f['capacity'].values())} (tiers "
                  f"{'/'.join(f['capacity'])}), shard_spread {f['shard_spread']}, "
                  f"contention_idle {f['contention_idle']}, join_stall_s {f['join_stall_s']}")
            for name, c in r["claims"].items():
                print(f"  {name:18s} packets {_pts(c['packets gain'])}%  flow - packets "
                      f"{_pts(c['flow - packets'])} pts: {c['verdict']}")
        judged = {s: {n: {k: v for k, v in c.items() if k != "verdict"}
                      for n, c in r["claims"].items()}
                  for s, r in rungs.items() if "refused" not in r}
        steps = ladder_steps(judged)
        if not steps:
            print("\n  fewer than two rungs ran: no ladder verdict")
            continue
        print(f"\n  the two finest rungs, {steps[0].coarse:g} -> {steps[0].fine:g} (change, "
              "points; agree: inside the 5-point band):")
        for s in steps:
            print(f"  {s.claim:18s} {s.figure:15s} {_pts(s.change)}: {s.verdict}")


def project(args, overrides: dict, ladder: dict) -> None:
    taken = [r["seeds"] for rungs in ladder.values() for r in rungs.values() if "seeds" in r]
    seeds = args.seeds or (max(taken) if taken else 208)
    print(f"\nA plan of {seeds} seeds at each scale (ns-3's cost estimate; the demo's window):")
    print(f"| ns3.scale | CPU a seed | 2 cores | {SERVER_CORES} cores | "
          f"{args.cluster} x {SERVER_CORES} cores |")
    print("|---|---|---|---|---|")
    for scale in args.project:
        one = first_round(for_ns3(load_scenario(args.scenario, {**overrides,
                                                                "ns3.scale": scale})), 1, 1)
        print(f"| {scale:g} | {_time(one.seed_cpu_s)} | {_time(one.plan_wall_s(seeds, 2))} | "
              f"{_time(one.plan_wall_s(seeds, SERVER_CORES))} | "
              f"{_time(one.plan_wall_s(seeds, SERVER_CORES * args.cluster))} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "validate.yaml"))
    ap.add_argument("--scales", default="2e-4,1e-3,1e-2")
    ap.add_argument("--profiles", default="linux,datacenter",
                    help=f"of {', '.join(PROFILES)}")
    ap.add_argument("--budget", default="30m", help="each rung's wall budget (e.g. 30m)")
    ap.add_argument("--out", type=Path, default=Path("results/ladder"))
    ap.add_argument("--jobs", type=int, default=0, help="local processes (0: one per core)")
    ap.add_argument("--dask", default=None, help="a Dask scheduler's address")
    ap.add_argument("--project", default="1e-1,1", help="scales to cost, not run")
    ap.add_argument("--seeds", type=int, default=None,
                    help="the projected plan's seeds (default: the most a rung took)")
    ap.add_argument("--cluster", type=int, default=8, help="16-core servers on Dask")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    metavar="FIELD=VALUE")
    ap.add_argument("--read", action="store_true",
                    help="judge the rungs already under --out; run none")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = ap.parse_args()
    args.scales = [float(s) for s in args.scales.split(",")]
    args.project = [float(s) for s in args.project.split(",") if s]
    args.profiles = args.profiles.split(",")
    unknown = [p for p in args.profiles if p not in PROFILES]
    if unknown:
        ap.error(f"--profiles: unknown {', '.join(unknown)} (known: {', '.join(PROFILES)})")
    args.budget = Duration().convert(args.budget, None, None)
    overrides = dict(s.split("=", 1) for s in args.sets)
    ladder = climb(args, overrides)
    show(ladder)
    project(args, overrides, ladder)
    if args.json:
        def plain(x):
            return x.as_dict() if hasattr(x, "as_dict") else str(x)
        args.json.write_text(json.dumps({p: {f"{s:g}": r for s, r in rungs.items()}
                                         for p, rungs in ladder.items()},
                                        default=plain, indent=1))


if __name__ == "__main__":
    main()
