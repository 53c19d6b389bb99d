"""Packet-vs-flow fidelity on every workload profile (root, Open vSwitch): printed, never
asserted.

One `testbed validate` per row, side by side in one invocation: the shipped trace's
chatbot, RAG and long-context slices, the synthetic generator, and the two adversarial
scenarios (ToR-uplink hash collisions, a burst of tiny transfers). Per row: the replay's
median and p90 |error| per whole transfer above the validity floor with the flow model's
TCP terms (bootstrap 95% CI), how many transfers fell below the floor, the mean-TTFT
verdict per scheduler with its CI, ranking agreement per seed, the faithful runs, the
gain verdicts (flow minus packets within 5 points: agree / disagree / inconclusive) and
the requests judged per wall-minute (measured on faithful packet runs); under it, what
the machine dropped or held before the switches' queues over the row's packet runs.
With --repeats N each row's first seed runs N more times on packets (RR; on ns-3 the
first 8 seeds of every scheduler, each run perturbed: validate/repeat.jittered), and the
row gives packets against packets on the transfers offered alike (testbed/validate/engines/repeat.py)
beside the replay on the same transfers: the floor for the per-transfer targets; on ns-3
also packets deciding again, every transfer matched wherever placed: the both-engines
figure's floor.
Targets: median <= 5%, p90 <= 15%, both engines' median <= 10%, TTFT within 5% with the
CI inside +-10%, same ranking, every run faithful, every gain verdict conclusive; after
the table, each row against the per-transfer and ranking targets, the replay's median and
p90 and both engines' median read against packets' own (out of reach where repeated runs
already differ by more). With
three rows or more, last: which flow-model terms are on by default, each chosen leaving
one row out in turn
(testbed/validate/comparison/selection.py; benchmarks/bench_select.py does it on finished folders).

With --packets ns3 every row is judged against ns-3's packets instead (no root; its
calibration and every fitted term from ns-3's own probes, never from the rows; 8 seeds a
row by default, every core). With --flow-model NAME (repeatable; `--flow-model simple`: the
four built-in simple models) each row also judges those network models against its
packets (testbed/validate/pipelines/flow_models.py), and a last table gives one verdict row per
model and row.

Run: sudo .venv/bin/python benchmarks/bench_validate.py [--rows chatbot,rag] [--seeds 2]
     [--packets emulation|ns3] [--flow-model simple | --flow-model NAME ...]
     [--measure 12] [--target-ci 0.05 --budget 540] [--repeats 3] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

from testbed.cli.common import handle_signals
from testbed.emulation.ingress import machine_drops
from testbed.model.extensions import network_models
from testbed.scenario import load_scenario
from testbed.sweep import Executor
from testbed.validate.comparison.document import load
from testbed.validate.comparison.selection import row_figures, selection_lines
from testbed.validate.comparison.summary import acceptance
from testbed.validate.pipelines.judge_folder import with_flow_models
from testbed.validate.pipelines.ns3_pipeline import validate_ns3
from testbed.validate.pipelines.pipeline import validate
from testbed.validate.report import model_table

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "scenarios" / "validate.yaml"
ROWS = {
    "chatbot": (BASE, {"workload.profile": "chatbot"}),
    "rag": (BASE, {}),
    "long-context": (BASE, {"workload.profile": "long-context"}),
    "synthetic": (BASE, {"workload.trace": None,
                         "workload.synthetic": {"mean_input": 8000, "documents": 32},
                         "workload.profile": "all"}),
    "uplink-collision": (ROOT / "scenarios" / "validate-uplink-collision.yaml", {}),
    "tiny-burst": (ROOT / "scenarios" / "validate-tiny-burst.yaml", {}),
}


def pct(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}%"


def row(name: str, doc: dict, wall: float) -> str:
    t = doc["targets"]
    g = t.get("gain_verdicts") or {}
    judged = doc.get("judged", {}).get("measured_requests", 0)
    below = doc["whole_below_floor"]["replay_tcp"]["n"]
    above = doc["whole_above_floor"]["replay_tcp"]["n"]
    ttft = "; ".join(f"{s}: {v['sentence']}" for by in doc["ttft_verdicts"]["tcp"].values()
                     for s, v in by.items())
    ranks = "; ".join(f"{r['same']}/{r['seeds']}" for r in doc["seed_rankings"]["tcp"].values())
    fluid = doc["whole_transfers"]["replay_calibrated"]
    return (f"| {name} | {pct(t['replay_median_abs_transfer_error'])} "
            f"[{pct(t['replay_median_ci'][0])}, {pct(t['replay_median_ci'][1])}] | "
            f"{pct(t['replay_p90_abs_transfer_error'])} "
            f"[{pct(t['replay_p90_ci'][0])}, {pct(t['replay_p90_ci'][1])}] | "
            f"{pct(fluid['median_abs_error'])} / {pct(fluid['p90_abs_error'])} | "
            f"{above} / {below} | {ttft or '-'} | {ranks or '-'} | "
            f"{t['runs'] - t['unfaithful_runs']}/{t['runs']} | "
            f"{g.get('agree', 0)} / {g.get('disagree', 0)} / {g.get('inconclusive', 0)} | "
            f"{judged} ({60 * judged / wall:.0f}/min) | {floor(doc.get('repeat'))} | "
            f"{wall:.0f} s |")


def floor(rep: dict | None) -> str:
    """Packets against packets, and the replay on the same transfers (--repeats); on ns-3
    also packets deciding again (the both-engines figure's floor)."""
    if not rep:
        return "-"
    same = rep.get("replay_same_transfers") or {}
    mid, ci = rep.get("median_ci") or [None, None], rep.get("p90_ci") or [None, None]
    return (f"{pct(rep['median_abs_error'])} [{pct(mid[0])}, {pct(mid[1])}] / "
            f"{pct(rep['p90_abs_error'])} [{pct(ci[0])}, {pct(ci[1])}] "
            f"(replay {pct(same.get('median_abs_error'))} / {pct(same.get('p90_abs_error'))}, "
            f"{same.get('n', 0)} transfers, {rep['runs']} runs)"
            + (f"; deciding again {pct(rep['engines']['median_abs_error'])}"
               if rep.get("engines") else ""))


def ingress_line(folder: Path) -> str:
    """What the machine dropped or held before the switches' queues over the row's packet
    runs (fidelity.json's `ingress`, testbed/emulation/ingress.py)."""
    got = [json.loads(f.read_text()).get("ingress") or {}
           for f in sorted(folder.glob("*emulation*/cells/*/*/seed*/fidelity.json"))]
    got = [g for g in got if g.get("held_samples")]
    if not got:
        return "before the queues: not read"
    drops = sum(machine_drops(g) or 0 for g in got)
    p99 = [g["held_p99_bytes"] / 1e3 for g in got]
    full = [g["fullest_share"] for g in got]
    line = (f"before the queues, {len(got)} runs: machine drops {drops}, datapath buffers "
            f"held p99 {min(p99):.0f}-{max(p99):.0f} KB, fullest socket {min(full):.0%}-"
            f"{max(full):.0%}")
    waits = [(g["wait_mean_ms"], g["wait_p99_ms"]) for g in got
             if g.get("wait_mean_ms") is not None]
    if waits:  # upper bounds, wall ms (testbed/emulation/ingress.py)
        mean, p99 = zip(*waits, strict=True)
        line += (f"; a wait there of at most {min(mean):.2f}-{max(mean):.2f} ms mean, "
                 f"{min(p99):.2f}-{max(p99):.2f} ms p99 per switch (wall)")
    return line


def acceptance_lines(accepted: dict[str, dict]) -> list[str]:
    """Each row against the per-transfer and ranking targets, the replay's median and p90
    read against packets' own where --repeats measured them (testbed/validate/comparison/summary.py)."""
    lines = ["Targets per row (replay median <= 5% and p90 <= 15%, each read against packets' "
             "own, both engines median <= 10%, the same ranking in every seed):",
             "", "| row | replay median | replay p90 | both engines median | same ranking |",
             "|---|---|---|---|---|"]
    for name, a in accepted.items():
        lines.append(f"| {name} | " + " | ".join(a[k][1] for k in (
            "replay_median", "replay_p90", "engines_median", "same_ranking")) + " |")
    return lines


def main() -> None:
    handle_signals()  # SIGTERM tears the fabric down as Ctrl-C does
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS), help=f"of {', '.join(ROWS)}")
    ap.add_argument("--seeds", type=int, default=None,
                    help="seeds a row (default 1 on the emulation, 8 on ns-3)")
    ap.add_argument("--packets", choices=("emulation", "ns3"), default="emulation",
                    help="whose packets judge the flow model: the emulation (root) or ns-3 "
                         "(every core; a seed repeats exactly, --repeats perturbs it)")
    ap.add_argument("--measure", type=float, default=None, help="measurement seconds")
    ap.add_argument("--target-ci", type=float, default=None, help="sequential: half-width")
    ap.add_argument("--budget", type=float, default=None, help="sequential: wall seconds")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--out", default="/tmp/netkv-bench-validate")
    ap.add_argument("--repeats", type=int, default=0,
                    help="run each row's first seed N more times on packets (RR; on ns-3 its "
                         "first 8 seeds, each run perturbed): the floor")
    ap.add_argument("--flow-model", dest="models", action="append", default=[],
                    metavar="NAME", help="judge this network model too (repeatable); simple: "
                    "the four built-in simple models")
    args = ap.parse_args()
    models = [m for name in args.models
              for m in (network_models.SIMPLE if name == "simple" else [name])]
    model_lines = [f"| row | {' | '.join(model_table.HEADER)} |",
                   "|---" * (len(model_table.HEADER) + 1) + "|"]
    lines = ["| row | replay median (TCP, above floor) [CI] | p90 [CI] | fluid median / p90 "
             "(all) | transfers above / below floor | mean TTFT per scheduler | same ranking "
             "(seeds) | faithful | gains a/d/i | judged (per wall-minute) | packets against packets "
             "median / p90 | wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    figures, accepted = {}, {}
    for name in args.rows.split(","):
        path, over = ROWS[name]
        over = {**over, "seeds": args.seeds or (8 if args.packets == "ns3" else 1)}
        if args.measure:
            over["workload.measure_s"] = args.measure
        for item in args.sets:
            key, _, value = item.partition("=")
            over[key] = yaml.safe_load(value)
        sc = load_scenario(path, over)
        t0 = time.perf_counter()
        if args.packets == "ns3":
            with Executor.local(0) as pool:
                folder = validate_ns3(sc, Path(args.out), executor=pool, repeats=args.repeats)
        else:
            folder = validate(sc, Path(args.out), target_ci=args.target_ci,
                              budget_s=args.budget, repeats=args.repeats)
        wall = time.perf_counter() - t0
        if models:
            with Executor.local(0) as pool:
                with_flow_models(folder, models, pool)
            model_lines += [f"| {name} | " + " | ".join(r) + " |"
                            for r in model_table.rows(load(folder / "comparison.json")
                                                      ["flow_models"])]
            print("\n".join(model_lines[-len(models) - 1:]), flush=True)
        doc = load(folder / "comparison.json")
        lines.append(row(name, doc, wall))
        figures[name] = row_figures(doc)
        accepted[name] = acceptance(doc)
        print(f"{name}: {folder}", flush=True)
        print(lines[-1], flush=True)
        print(f"{name}: {ingress_line(folder)}", flush=True)
    print("\n".join(lines))
    print("\n".join(["", *acceptance_lines(accepted)]))
    if models:
        print("\n".join(["", *model_table.intro(), "",
                         *model_lines]))
    if len(figures) >= 3:  # each term chosen on the other rows, judged on the one left out
        print("\n".join(["", *selection_lines(figures)]))


if __name__ == "__main__":
    main()
