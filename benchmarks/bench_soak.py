"""Soak: many short packet-level runs back to back, and what they leave growing (root,
Open vSwitch): printed, never asserted.

Two modes, as users run them: `api` runs `testbed.api.emulate` N times in this one
process (a notebook, a sweep script), `cli` runs `testbed emulate` N times as separate
commands. After each run it samples: this process's open file descriptors and resident
memory (api), the machine's allocated file handles, network namespaces, veths, OVS ports,
our processes (cleanup.our_processes) and all processes. It prints the samples after
the first, the 10th and the last run, and the growth from the 10th to the last: a leak
shows as growth there (the first runs warm caches and imports).

Run: sudo .venv/bin/python benchmarks/bench_soak.py [--runs 50] [--mode api,cli]
     [--scenario scenarios/validate.yaml] [--out /tmp/netkv-soak]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from testbed import api
from testbed.cli.common import handle_signals
from testbed.emulation import cleanup

ROOT = Path(__file__).resolve().parent.parent
SHORT = {"schedulers": ["rr"], "seeds": 1, "drain_s": 30, "workload.warmup_s": 0.5,
         "workload.measure_s": 2}


def _count(cmd: list[str]) -> int:
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def sample() -> dict[str, int]:
    status = Path("/proc/self/status").read_text().splitlines()
    rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    ports = sum(_count(["ovs-vsctl", "--timeout=5", "list-ports", br])
                for br in subprocess.run(["ovs-vsctl", "--timeout=5", "list-br"],
                                         capture_output=True, text=True).stdout.split())
    return {
        "fds (this process)": len(os.listdir("/proc/self/fd")),
        "rss MB (this process)": rss_kb // 1024,
        "file handles (machine)": int(Path("/proc/sys/fs/file-nr").read_text().split()[0]),
        "namespaces": _count(["ip", "netns", "list"]),
        "veths": _count(["ip", "-o", "link", "show", "type", "veth"]),
        "ovs ports": ports,
        "our processes": len(cleanup.our_processes()),
        "processes": sum(1 for p in os.listdir("/proc") if p.isdigit()),
    }


def soak(mode: str, runs: int, scenario_path: str, out: Path) -> list[dict[str, int]]:
    samples = []
    sc = api.load_scenario(scenario_path, SHORT)
    for k in range(runs):
        t0 = time.perf_counter()
        if mode == "api":
            api.emulate(sc, out, force=True)
        else:
            cmd = [sys.executable, "-m", "testbed", "emulate", scenario_path, "--out",
                   str(out), *[a for key, v in SHORT.items()
                               for a in ("--set", f"{key}={v}".replace("'", ""))]]
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        samples.append({**sample(), "wall s": round(time.perf_counter() - t0)})
        for folder in out.glob("*-emulation-*"):  # the disk is not what is measured
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{mode} run {k + 1}/{runs}: {samples[-1]}", flush=True)
    return samples


def table(mode: str, samples: list[dict[str, int]]) -> list[str]:
    picks = sorted({0, min(9, len(samples) - 1), len(samples) - 1})
    head = ["measure", *[f"after run {k + 1}" for k in picks], "growth 10th -> last"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in samples[0]:
        values = [samples[k][key] for k in picks]
        lines.append(f"| {key} | " + " | ".join(map(str, values))
                     + f" | {values[-1] - values[min(1, len(values) - 1)]:+d} |")
    return [f"## {mode}: {len(samples)} runs", "", *lines, ""]


def main() -> None:
    handle_signals()  # SIGTERM tears the fabric down as Ctrl-C does
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--mode", default="api,cli", help="api, cli or both (comma-separated)")
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "validate.yaml"))
    ap.add_argument("--out", default="/tmp/netkv-soak")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = []
    for mode in args.mode.split(","):
        report += table(mode, soak(mode, args.runs, args.scenario, out))
    left = cleanup.find_leftovers()
    print("\n".join([*report, f"leftovers: {left.describe()}"]))


if __name__ == "__main__":
    main()
