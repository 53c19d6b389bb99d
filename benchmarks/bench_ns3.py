"""ns-3 beside the emulation: speed and the probes' transfer times. Printed, never asserted.

speed: the demo scenario (scenarios/validate.yaml: RR, CLA*, NetKV-Full) on ns-3 with one
and with two processes (--seeds seeds each) and, as root, on the emulation (one seed),
side by side in one run: wall per run, packets put on a wire per wall-second, the ns-3
program's peak memory and the judged requests (measured and served; on the emulation
only on faithful runs) per wall-minute; then where an ns-3 run's time goes (the ns-3
program's CPU, the Python side's, the commands that waited for an answer) and the Python
side's top functions (cProfile of one run).

probes: `testbed calibrate`'s lone and competing transfers (every tier, 1-8 transfers of
TP shards, three decades of size) on ns-3 and, as root, on the emulation: per tier and
size the lone times and ns-3's difference; ns-3 again as the emulation's twin (the
kernel's wall-time constants, its 40 ms delayed ACK among them, at the emulation's time
dilation d are 1/d of Linux's in modelled time); the competing sets' slowest transfer on
both, and the emulation's own repeat spread on its six repeated lone transfers.

roce: RoCE's behaviours on small fabrics at the replica's rung (1e-2 of 40 Gbit/s,
testbed/ns3sim/roce_fabrics.py): two flows' convergence to fair shares, an incast's queue
against Kmax, PFC's pauses hop by hop and their release, a cycle of pauses and the
watchdog that breaks it, on a ring and on the fat-tree once four of its links are down
(with nothing down, the same flows); each with the wall time it cost.

Run: [sudo] .venv/bin/python benchmarks/bench_ns3.py [--only speed|probes|roce]
     [--seeds 4] [--scenario scenarios/validate.yaml] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from testbed.api import load_scenario
from testbed.cells import Task
from testbed.lifecycle import SERVED_STATES
from testbed.ns3sim.program import program_path
from testbed.ns3sim.replayer import emulation_twin
from testbed.runner import run_simulated, run_task
from testbed.sweep import Executor
from testbed.validate.engines.ns3_probes import probe_tiers


def judged(folder: Path, faithful_only: bool = False) -> tuple[int, int]:
    """(judged requests, runs) of a run folder: measured and served requests, on runs
    the emulation judged faithful (every ns-3 run counts)."""
    import csv

    n, runs = 0, 0
    for cell in sorted(folder.glob("cells/*/*/seed*")):
        if faithful_only:
            fid = json.loads((cell / "fidelity.json").read_text())
            if fid.get("verdict") != "faithful":
                continue
        runs += 1
        with (cell / "requests.csv").open() as f:
            n += sum(r["measured"] == "True" and r["state"] in SERVED_STATES
                     for r in csv.DictReader(f))
    return n, runs


def ns3_speed(sc, out: Path, jobs: int) -> dict:
    t0 = time.perf_counter()
    with Executor.local(jobs) if jobs > 1 else Executor.serial() as ex:
        outcome = run_simulated(sc, out, executor=ex, engine="ns3")
    wall = time.perf_counter() - t0
    cells = sorted(outcome.folder.glob("cells/*/*/seed*"))
    summaries = [json.loads((c / "summary.json").read_text()) for c in cells]
    n, runs = judged(outcome.folder)
    return {"wall_s": wall, "runs": runs, "judged": n,
            "packets": sum(s["engine_packets"] for s in summaries),
            "rss_mb": max(s["engine_ns3_peak_rss_mb"] for s in summaries),
            "ns3_cpu_s": sum(s["engine_ns3_cpu_s"] for s in summaries),
            "python_cpu_s": sum(s["engine_python_cpu_s"] for s in summaries),
            "asks": sum(s["engine_ns3_requests"] for s in summaries),
            "run_wall_s": statistics.median(s["engine_wall_s"] for s in summaries)}


def emulation_speed(sc, out: Path) -> dict | None:
    if os.geteuid() != 0:
        print("emulation: skipped (needs root)")
        return None
    from testbed.api import emulate

    t0 = time.perf_counter()
    run = emulate(load_scenario(sc, {"seeds": 1}), out)
    wall = time.perf_counter() - t0
    n, runs = judged(run.folder, faithful_only=True)
    return {"wall_s": wall, "runs": len(run.cells), "faithful": runs, "judged": n}


def speed(sc, seeds: int) -> None:
    sc = load_scenario(sc, {"seeds": seeds})
    program_path()
    with tempfile.TemporaryDirectory() as tmp:
        rows = {f"ns-3, {j} process{'es' if j > 1 else ''}": ns3_speed(sc, Path(tmp) / str(j), j)
                for j in (1, 2)}
        emu = emulation_speed(sc, Path(tmp) / "emu")
    print(f"\n{sc.name}: {seeds} seed(s) x {len(sc.schedulers)} schedulers on ns-3\n")
    print("| engine | runs | wall s | wall s per run | packets per wall-s | peak MB | "
          "judged | judged per wall-min |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in rows.items():
        print(f"| {name} | {r['runs']} | {r['wall_s']:.1f} | {r['wall_s'] / r['runs']:.2f} | "
              f"{r['packets'] / r['wall_s']:,.0f} | {r['rss_mb']:.0f} | {r['judged']} | "
              f"{60 * r['judged'] / r['wall_s']:.0f} |")
    if emu:
        print(f"| emulation (root) | {emu['runs']} ({emu['faithful']} faithful) | "
              f"{emu['wall_s']:.1f} | {emu['wall_s'] / emu['runs']:.1f} | | | {emu['judged']} | "
              f"{60 * emu['judged'] / emu['wall_s']:.0f} |")
    one = rows["ns-3, 1 process"]
    print(f"\nwhere an ns-3 run's time goes (1 process, {one['runs']} runs): ns-3 program "
          f"{one['ns3_cpu_s']:.1f} s CPU, Python side {one['python_cpu_s']:.1f} s CPU, "
          f"{one['asks'] / one['runs']:.0f} answered commands per run; median run "
          f"{one['run_wall_s']:.2f} s wall")
    profile = cProfile.Profile()
    task = Task(0, {}, sc, sc.schedulers[-1], sc.seed, engine="ns3")
    profile.runcall(run_task, task)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(12)
    print("\nPython side of one run (cProfile, cumulative; the ns-3 program's own time is "
          "inside the pipe reads):")
    print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))


def emulation_probes(sc) -> dict | None:
    if os.geteuid() != 0:
        print("emulation probes: skipped (needs root)")
        return None
    from testbed.validate.engines.fabric_probes import probe_fabric

    return probe_fabric(sc, print)


def _pct(a: float, b: float) -> str:
    return f"{100 * (a - b) / b:+.0f}%"


def probes(sc) -> None:
    exe = program_path()
    emu = emulation_probes(sc)
    d = sc.emulation.time_dilation
    plain, timed = probe_tiers(sc, exe), probe_tiers(emulation_twin(sc), exe)
    print(f"\nlone transfers, modelled seconds (ns-3 with Linux's own wall-time constants; "
          f"as the emulation's twin, the kernel's at dilation {d:g}: delayed ACK "
          f"{40 / d:g} ms)\n")
    print("| tier | GB | emulation | ns-3 | diff | ns-3, the emulation's twin | diff |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for tier in plain:
        for k, sample in enumerate(plain[tier]["samples"]):
            e = emu[tier]["samples"][k]["seconds"] if emu else None
            t = timed[tier]["samples"][k]["seconds"]
            print(f"| {tier} | {sample['bytes'] / 1e9:g} | {e and f'{e:.3f}' or '-'} | "
                  f"{sample['seconds']:.3f} | {_pct(sample['seconds'], e) if e else '-'} | "
                  f"{t:.3f} | {_pct(t, e) if e else '-'} |")
    print("\ncompeting sets: the slowest transfer, modelled seconds; the emulation's repeat "
          "spread: its six repeated lone 0.5 GB transfers (min-max)\n")
    print("| tier | set | emulation | ns-3 | ns-3, the emulation's twin | emulation's spread |")
    print("| --- | --- | --- | --- | --- | --- |")
    for tier in plain:
        spread = "-"
        if emu:
            rep = [s["seconds"] for s in emu[tier]["spread_samples"]]
            spread = f"{min(rep):.3f}-{max(rep):.3f}"
        for k, c in enumerate(plain[tier]["competing"]):
            label = f"{c['competing']} x {c['bytes'] / 1e9:g} GB" + (
                f" every {c['asked_spacing_s']:.2f} s" if c["asked_spacing_s"] else "")
            e = max(emu[tier]["competing"][k]["seconds"]) if emu else None
            print(f"| {tier} | {label} | {e and f'{e:.2f}' or '-'} | {max(c['seconds']):.2f} | "
                  f"{max(timed[tier]['competing'][k]['seconds']):.2f} | {spread} |")


def roce() -> None:
    from testbed.ns3sim import roce_fabrics as rf

    real = rf.SCALE  # modelled ms x SCALE: the real fabric's
    print(f"\n## RoCE on small fabrics ({rf.LINE_BPS * rf.SCALE / 1e6:.0f} Mbit/s links: "
          f"{rf.SCALE:g} of {rf.LINE_BPS / 1e9:.0f} Gbit/s, DCQCN's times x {1 / rf.SCALE:g})\n")
    rows = []
    t = time.perf_counter()
    f = rf.fairness()
    rows.append(("two flows, one bottleneck", f"fair (within 15%) {f['fair_after_ms']:.0f} "
                 f"modelled ms after the second began ({f['fair_after_ms'] * real:.1f} real "
                 f"ms); link use {f['use_last_2s']:.0%}; {f['cnps']} CNPs", t))
    t = time.perf_counter()
    i = rf.incast(8)
    rows.append(("incast of 8", f"peak queue {i['peak_bytes'] / 1e3:.0f} KB (the first burst), "
                 f"{i['late_max_bytes'] / 1e3:.0f} KB from 1 s on (Kmax "
                 f"{i['kmax_bytes'] / 1e3:.0f}); {i['pauses']} pauses, {i['kv_drops']} KV "
                 f"drops, {i['ended']} of 8 ended", t))
    t = time.perf_counter()
    p = rf.propagation(64)
    rows.append(("PFC alone, chain", f"paused: {', '.join(f'{a}->{b}' for a, b in p['paused'])}; "
                 f"deepest ingress {p['deepest_ingress']} B (Xoff 64000 + headroom "
                 f"{p['headroom']}); paused at the end: {len(p['paused_at_end'])}; "
                 f"{p['kv_drops']} drops", t))
    t = time.perf_counter()
    d = rf.deadlock(20)
    first = min((at for *_, at in d["trips"]), default=None)
    rows.append(("ring (not up-down)", f"stuck: {len(d['stuck'])} egresses, "
                 f"{d['ended_before']} ended before the watchdog; it tripped on "
                 f"{len(d['trips'])} ({first and f'{first / 1e6:.0f} modelled ms'}); "
                 f"{d['ended']} of 3 then ended, {d['resent']} NAKs and timeouts", t))
    for name, down in (("fat-tree, up-down", frozenset()),
                       ("fat-tree, 4 ToR uplinks down", rf.CYCLE_DOWN)):
        t = time.perf_counter()
        g = rf.fat_tree_deadlock(down)
        cyc = " ".join(f"{a}>{b}" for a, b in g["cycle"]) or "none"
        rows.append((name, f"dependency cycle: {cyc}; {len(g['flows'])} flows filling it: "
                     f"{len(g['stuck'])} egresses paused, {g['ended_before']} ended before "
                     f"the watchdog, which tripped on {len(g['trips'])} "
                     f"({', '.join(f'{a}>{b}' for a, b, _ in g['trips']) or '-'}); "
                     f"{g['ended']} then ended, {g['kv_drops']} KV drops", t))
    print("| fabric | what happened | wall s |")
    print("| --- | --- | --- |")
    ends = [r[2] for r in rows[1:]] + [time.perf_counter()]
    for (name, text, t0), t1 in zip(rows, ends, strict=True):
        print(f"| {name} | {text} | {t1 - t0:.1f} |")
    short_transfers()


def short_transfers() -> None:
    """Short writes under DCQCN against max-min sharing on the replica's rungs and on the
    real fabric's rates (scale 1): how far the replica holds DCQCN for short transfers."""
    from testbed.ns3sim import roce_fabrics as rf

    print("\n## Short writes into one receiver: completion time / max-min's (the flow "
          "model's), mean and worst\n")
    every = ({}, {"timers": "absolute"}, {"kmin_kb": 1e6, "kmax_kb": 2e6})
    # short writes (4-10 real ms alone) under each timer rule and with marking off; large
    # ones (300 ms alone, the demo's shards) once: 6 M packets at scale 1, 2-3 minutes
    patterns = [(8, 0.5, 20, every), (16, 0.25, 20, every), (4, 1.0, 50, every),
                (4, 50.0, 1500, every[:1])]
    scales = (1e-2, 1e-1, 1.0)
    print("| writes (real ms apart, MB each) | timers | " +
          " | ".join(f"scale {x:g}" for x in scales) + " | wall s |")
    print("| --- | --- | " + " | ".join("---" for _ in scales) + " | --- |")
    for senders, gap, mb, variants in patterns:
        for over in variants:
            t = time.perf_counter()
            got = [rf.short_transfers(x, senders, mb, gap, over) for x in scales]
            name = over.get("timers", "scaled") if "kmin_kb" not in over else "no marking"
            print(f"| {senders} ({gap:g}, {mb:g}) | {name} | " +
                  " | ".join(f"{g['fct_vs_fair_mean']:.2f} / {g['fct_vs_fair_max']:.2f}"
                             for g in got) + f" | {time.perf_counter() - t:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("speed", "probes", "roce"))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--scenario", default="scenarios/validate.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    args = parser.parse_args()
    sc = load_scenario(args.scenario, {k: yaml.safe_load(v) for k, v in
                                       (s.split("=", 1) for s in args.set)})
    if args.only in (None, "speed"):
        speed(sc, args.seeds)
    if args.only in (None, "probes"):
        probes(sc)
    if args.only in (None, "roce"):
        roce()


if __name__ == "__main__":
    main()
