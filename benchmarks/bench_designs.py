"""What each estimation design would buy on a validation already run: seeds needed to settle
the demo's mean-TTFT claims, today's design against the alternatives. Printed, never asserted.

The claim is the same under every design: each scheduler's free-running mean-TTFT gain,
the flow model's minus the packets', inside the 5-point band (docs/validation.md, "Designs
that narrow a claim"). Each design is an estimator of it, one value per packet seed s (P:
the packets' gain, one draw; F: the flow model's own draw of the seed, same seed so same
requests and same tie-break stream; Fbar: the flow model's mean over its draws of the seed;
Fo: the flow model at the packets' own placements):

- today:        Fbar - P (the flow model's mean over its draws, minus the packets' draw);
- flow draws -> infinity: today's, less the flow model's own draws' variance (d^2 / D);
- paired draws: F - P (common random numbers only: the flow's draw with the same seed);
- control variate: Fbar - (P - b (F - Fbar)): the flow's own-draw deviation F - Fbar
  has mean 0 by construction, so it corrects P's draw by what the same random numbers did
  to the flow model (b fitted by least squares on the seeds);
- network part only: Fo - P, the same decisions on both engines: not the claim (the
  scheduling part is left out) but the floor any design that keeps the claim is above.

Each estimator's standard error is taken over the workload segments (seeds that replay one
segment are one cluster), and the seeds needed for a half-width W are n (z se / W)^2, with
W the band less the claim's |mean| (what an interval centred there needs to fit inside).

Run: .venv/bin/python benchmarks/bench_designs.py FOLDER
  FOLDER: a `testbed validate --packets ns3` folder (or its ns3/ subfolder's), or one of
  the emulation's; it needs the flow model's draws (comparison.json's trajectory).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from testbed.api import load_scenario
from testbed.records import read_csv
from testbed.validate.judging.claims import claim_pairs, served
from testbed.validate.judging.stats import z
from testbed.validate.judging.targets import GAIN_TOLERANCE
from testbed.workloads.build import workload_seed

POINT = "000-base"


def seed_ttfts(folder: Path) -> dict[int, dict[str, dict[str, float]]]:
    """seed -> scheduler -> request id -> TTFT of the measured, served requests."""
    out: dict[int, dict[str, dict[str, float]]] = {}
    for run in sorted((folder / "cells" / POINT).glob("*/seed*")):
        rows = read_csv(run / "requests.csv")
        out.setdefault(int(run.name[4:]), {})[run.parent.name] = {
            r["id"]: float(r["ttft"]) for r in rows
            if str(r.get("measured")).lower() in ("true", "1") and served(r)}
    return out


def gain(runs: dict, seed: int, scheduler: str, base: str, ids: set[str]) -> float:
    t = runs[seed]
    return (np.mean([t[scheduler][i] for i in ids]) / np.mean([t[base][i] for i in ids])
            - 1.0)


def cluster_se(values: np.ndarray, groups: np.ndarray) -> float:
    means = np.array([values[groups == g].mean() for g in np.unique(groups)])
    return float(means.std(ddof=1) / math.sqrt(len(means)))


def designs(p, f, fbar, fo, draw_sd: float, draws: int) -> dict[str, np.ndarray | float]:
    own = f - fbar
    beta = float(np.cov(p - fbar, own)[0, 1] / own.var(ddof=1)) if own.var() > 0 else 0.0
    return {"today": fbar - p, "paired draws": f - p,
            "control variate": fbar - (p - beta * own), "network part only": fo - p,
            "beta": beta, "d2/D": draw_sd * draw_sd / draws}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    doc = json.loads((args.folder / "comparison.json").read_text())
    scenario = load_scenario(str(args.folder / "scenario.yaml"))
    folders = {k: Path(v) for k, v in doc["folders"].items()}
    packets = seed_ttfts(folders["emulation"])
    flow = seed_ttfts(folders["flow_tcp"])
    forced = seed_ttfts(folders["flow_tcp_forced"])
    spreads = doc["trajectory"][POINT]
    level = 0.95
    print(f"{args.folder}: {len(packets)} packet seeds, {scenario.workload.segments or 'no'} "
          f"segments; the band +-{100 * GAIN_TOLERANCE:.0f} points; 95% intervals")
    print(f"{'claim':20s} {'design':18s} {'mean':>7s} {'sd/seed':>8s} {'se':>6s} "
          f"{'seeds for W':>11s} {'x today':>8s}")
    schedulers = sorted({s for runs in packets.values() for s in runs})
    for scheduler, base in claim_pairs(schedulers):
        name = f"{scheduler} vs {base}"
        spread = spreads.get(name)
        if spread is None:
            continue
        rows = []
        for seed in sorted(set(packets) & set(flow) & set(forced)):
            if str(seed) not in spread["shifts"]:
                continue
            ids = set.intersection(*(set(r[s]) for r in (packets[seed], flow[seed],
                                                          forced[seed])
                                     for s in (scheduler, base)))
            if not ids:
                continue
            f = gain(flow, seed, scheduler, base, ids)
            rows.append((workload_seed(scenario, seed), gain(packets, seed, scheduler, base, ids),
                         f, f + spread["shifts"][str(seed)],
                         gain(forced, seed, scheduler, base, ids)))
        if len(rows) < 8:
            print(f"{name:20s} too few seeds ({len(rows)})")
            continue
        groups, p, f, fbar, fo = (np.array(c) for c in zip(*rows, strict=True))
        got = designs(p, f, fbar, fo, spread["sd"], spread["draws"])
        n = len(p)
        today_se = cluster_se(got["today"], groups)
        inf_se = math.sqrt(max(0.0, today_se ** 2 - got["d2/D"] / n))
        width = GAIN_TOLERANCE - abs(float(got["today"].mean()))
        needed = {}
        for design in ("today", "flow draws -> inf", "paired draws", "control variate",
                       "network part only"):
            values = got["today"] if design == "flow draws -> inf" else got[design]
            se = inf_se if design == "flow draws -> inf" else cluster_se(values, groups)
            seeds = n * (z(level) * se / width) ** 2 if width > 0 else math.inf
            needed[design] = seeds
            print(f"{name if design == 'today' else '':20s} {design:18s} "
                  f"{100 * values.mean():+7.2f} {100 * values.std(ddof=1):8.1f} "
                  f"{100 * se:6.2f} {seeds:11.0f} {seeds / needed['today']:8.2f}")
        print(f"{'':20s} (control variate's b = {got['beta']:.2f}; corr of the packets' and "
              f"the flow's own-draw deviations "
              f"{np.corrcoef(p - fbar, f - fbar)[0, 1]:.2f})")


if __name__ == "__main__":
    main()
