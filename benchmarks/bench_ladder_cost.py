"""What the scale ladder costs on ns-3, rung by rung, before any packet runs. Printed,
never asserted.

For each rung (ns3.scale) the packets one seed of the scenario puts on wires are counted
as `validate --packets ns3` counts them before it starts (testbed/validate/engines/
ns3_cost.py: the flow model's run of the first seed, each shard's segments and delayed
ACKs once per link, none lost), over this machine's measured rate (or the development
machine's), and each run's look and judging (the same at every scale). It prints a
seed's CPU, the first round (8 seeds) and a whole plan of SEEDS seeds on 2 local cores, a
16-core server and a Dask cluster of CLUSTER such servers: what a verdict at each rung
would take where. Packets grow with the scale (bytes on the
wire) and with the window; the rate is per packet, so the table is linear in both.

Run: .venv/bin/python benchmarks/bench_ladder_cost.py [--scenario scenarios/validate.yaml]
     [--scales 2e-4,1e-3,1e-2,1e-1,1] [--seeds 208] [--cluster 8] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from testbed.api import load_scenario
from testbed.validate.engines.ns3_cost import first_round
from testbed.validate.pipelines.ns3_pipeline import for_ns3
from testbed.validate.pipelines.ns3_rounds import FIRST_SEEDS

ROOT = Path(__file__).resolve().parent.parent


def hours(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=str(ROOT / "scenarios" / "validate.yaml"))
    parser.add_argument("--scales", default="2e-4,1e-3,1e-2,1e-1,1")
    parser.add_argument("--seeds", type=int, default=208,
                        help="a whole plan's seeds (208: what settled the demo at 2e-4)")
    parser.add_argument("--cluster", type=int, default=8, help="16-core servers on Dask")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args()
    overrides = dict(s.split("=", 1) for s in args.set)
    print(f"{Path(args.scenario).name}: {', '.join(f'{k}={v}' for k, v in overrides.items())}")
    head = ("| ns3.scale | packets a seed | CPU a seed | first round, 2 cores | "
            f"{args.seeds} seeds, 2 cores | 16 cores | {args.cluster} x 16 cores |")
    print(head)
    print("|" + "---|" * 7)
    for scale in (float(s) for s in args.scales.split(",")):
        scenario = for_ns3(load_scenario(args.scenario, {**overrides, "ns3.scale": scale}))
        one = first_round(scenario, 1, 1)
        wall = one.plan_wall_s
        print(f"| {scale:g} | {one.packets_per_seed:,.0f} | {hours(one.seed_cpu_s)} | "
              f"{hours(wall(FIRST_SEEDS, 2))} | {hours(wall(args.seeds, 2))} | "
              f"{hours(wall(args.seeds, 16))} | {hours(wall(args.seeds, 16 * args.cluster))} |")
    print(f"\nrate: {one.rate:,.0f} packets a CPU-second ({one.source}); a seed's CPU counts "
          f"its runs and, {one.judging_s:g} s a run, their looks and share of the judging")


if __name__ == "__main__":
    main()
