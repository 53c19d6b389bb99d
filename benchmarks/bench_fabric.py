"""Emulated-fabric measurements (root, Open vSwitch): figures, never assertions.

1. Largest aggregate throughput emulated faithfully, per datapath: the paper's fabric
   (16 hosts, 20 switches) at increasing scale factors, every prefill host sending to a
   tier-2 and a tier-3 decode host at once; the fidelity monitor says whether saturated
   links reached 95% of their rate, whether the CPU kept headroom, and how busy the
   datapath's busiest thread was (the userspace datapath's ceiling is one thread).
2. Oracle refresh period achieved (generated_at steps) against the configured poll.
3. Oracle HTTP latency (GET /oracle, sequential, loopback).

Run: sudo .venv/bin/python benchmarks/bench_fabric.py [--scales 1e-4,2e-4,5e-4,1e-3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from testbed.cli.common import handle_signals
from testbed.emulation.fidelity import FidelityMonitor
from testbed.emulation.net import EmulatedNetwork, kernel_datapath_available
from testbed.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
# the fabric tests' fat-tree (8 hosts, 10 switches): what a slow machine (a VM under
# software emulation) brings up in minutes instead of the paper's 20 switches
SMALL = {"gpus_per_server": 4, "aggs_per_pod": 2, "cores_per_agg": 1}


def scenario_file(tmp: Path, scale: float, datapath: str, ovs_instances: int = 1,
                  small: bool = False) -> Path:
    path = tmp / f"bench-{scale:g}-{ovs_instances}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "bench-fabric", "workload": {"trace": str(TRACE)},
        "emulation": {"scale": scale, "datapath": datapath, "poll_s": 1.0,
                      "ovs_instances": ovs_instances},
        **({"cluster": SMALL} if small else {}),
    }))
    return path


def load_pairs(spec) -> list[tuple[str, str]]:
    """Every prefill host sends to a tier-2 and a tier-3 decode host at once, no decode
    host receiving twice and the receivers spread over racks (the paper's fabric: 4
    prefill hosts, 8 flows)."""
    taken: set[str] = set()
    per_rack: dict[int, int] = {}
    pairs = []
    for tier in (2, 3):
        for p in spec.prefill_pool:
            free = [d for d in spec.decode_pool
                    if d.name not in taken and spec.tier(p.name, d.name) == tier]
            if free:
                dst = min(free, key=lambda d: per_rack.get(d.rack, 0))
                taken.add(dst.name)
                per_rack[dst.rack] = per_rack.get(dst.rack, 0) + 1
                pairs.append((p.name, dst.name))
    return pairs


def offered_load(network: EmulatedNetwork, pairs: list[tuple[str, str]],
                 seconds: float) -> float:
    """Run all pairs at once; return the aggregate received bits/s."""
    procs = []
    for k, (_, dst) in enumerate(pairs):
        network.host(dst).cmd(f"iperf3 -s -D -1 -p {5201 + k}")
    time.sleep(0.5)
    for k, (src, dst) in enumerate(pairs):
        ip = network.host(dst).IP()
        procs.append(network.host(src).popen(
            f"iperf3 -c {ip} -p {5201 + k} -t {seconds} -O 1 -J".split()))
    total = 0.0
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 30)
        with contextlib.suppress(ValueError, KeyError):  # a flow that failed adds nothing
            total += json.loads(out)["end"]["sum_received"]["bits_per_second"]
    return total


def throughput_sweep(scales: list[float], datapath: str, seconds: float,
                     instances: list[int] = (1,), small: bool = False) -> None:
    fabric = "small fat-tree, 10 switches" if small else "paper fabric, 20 switches"
    print(f"datapath {datapath}: aggregate throughput vs scale ({fabric}), "
          f"{os.cpu_count()} cores")
    base = None  # aggregate per unit of scale at the smallest scale: the linear reference
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # scale-major, daemons-minor: each scale's modes are measured back to back, so a
        # machine whose speed drifts compares them under the same conditions
        for scale in sorted(scales):
            for n in instances:
                base = _one(tmp, scale, datapath, n, seconds, base, small)


def _one(tmp: Path, scale: float, datapath: str, n: int, seconds: float, base: float | None,
         small: bool) -> float:
        path = scenario_file(tmp, scale, datapath, n, small)
        sc = load_scenario(path)
        pairs = load_pairs(sc.cluster.spec())
        with EmulatedNetwork(sc, path, tmp / f"run-{scale:g}-{n}") as net:
            monitor = FidelityMonitor(net.fabric, datapath=net.datapath,
                                      netns=net.interface_netns).start()
            total = offered_load(net, pairs, seconds)
            report = monitor.stop()
        host_rate = net.fabric.rate_bps(100.0)
        base = base or total / scale
        linear = total / (base * scale)
        print(f"  scale {scale:g}, {n} OVS daemon{'s' if n > 1 else ''} (host link "
              f"{host_rate / 1e6:.0f} Mbit/s, {len(pairs)} flows): aggregate "
              f"{total / 1e6:.1f} Mbit/s = {linear:.1%} of linear scaling "
              f"({'faithful' if linear >= 0.95 else 'NOT faithful'}), worst saturated link "
              f"{(report['worst_ratio'] or 0) * 100:.1f}% of its rate over "
              f"{report['links_checked']} links, CPU busy p95 "
              f"{report['cpu_busy_p95'] * 100:.0f}% on {os.cpu_count()} cores, busiest "
              f"datapath thread {_thread(report['datapath_thread'])} -> {report['verdict']}"
              + (f" ({'; '.join(report['reasons'])})" if report["reasons"] else ""))
        return base


def _thread(doc: dict | None) -> str:
    if doc is None:
        return "none seen"
    return (f"{doc['process']}: {doc['thread']} ({doc['role']}) {doc['busy_median'] * 100:.0f}% "
            "of a core "
            f"(p95 {doc['busy_p95'] * 100:.0f}%)")


def oracle_figures(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        path = scenario_file(tmp, 2e-4, "auto")
        sc = load_scenario(path)
        with EmulatedNetwork(sc, path, tmp / "run") as net:
            url = f"{net.base_url}/oracle"
            stamps, latencies = [], []
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                with urllib.request.urlopen(url, timeout=5) as resp:
                    doc = json.loads(resp.read())
                latencies.append((time.perf_counter() - t0) * 1e3)
                if not stamps or doc["generated_at"] != stamps[-1]:
                    stamps.append(doc["generated_at"])
                time.sleep(0.01)
        periods = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        print(f"oracle refresh: configured {sc.emulation.poll_s:g} s, achieved mean "
              f"{statistics.fmean(periods):.3f} s (min {min(periods):.3f}, max "
              f"{max(periods):.3f}) over {len(periods)} refreshes, all "
              f"{len(net.fabric.switches)} switches' {len(net.fabric.egress_interfaces())} "
              f"egress counters per refresh")
        latencies.sort()
        print(f"oracle HTTP GET /oracle: median {statistics.median(latencies):.2f} ms, p99 "
              f"{latencies[int(0.99 * (len(latencies) - 1))]:.2f} ms over {len(latencies)} "
              "requests")


def virtualisation() -> str:
    """How this machine runs: figures from a VM under software emulation (TCG) are
    CPU-bound far below what the same datapath does on hardware or under KVM."""
    try:
        kind = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        kind = "unknown"
    if kind == "qemu":
        return "a QEMU VM under software emulation (TCG): every figure is CPU-bound"
    return f"virtualisation: {kind}"


def main() -> None:
    handle_signals()  # SIGTERM tears the fabric down as Ctrl-C does
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="1e-4,2e-4,5e-4,1e-3,2e-3")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--ovs-instances", default="1,2", help="userspace datapath split "
                        "over this many OVS daemons, each measured at every scale")
    parser.add_argument("--only", choices=["throughput", "oracle"])
    parser.add_argument("--small", action="store_true", help="the fabric tests' small "
                        "fat-tree (8 hosts, 10 switches) instead of the paper's (16, 20): "
                        "for a slow machine such as a VM under software emulation")
    args = parser.parse_args()
    scales = [float(x) for x in args.scales.split(",")]
    print(f"machine: {os.cpu_count()} CPUs, {virtualisation()}")
    if args.only in (None, "throughput"):
        throughput_sweep(scales, "user", args.seconds,
                         [int(x) for x in args.ovs_instances.split(",")], args.small)
        if kernel_datapath_available():
            throughput_sweep(scales, "kernel", args.seconds, small=args.small)
        else:
            print("datapath kernel: not measured: this kernel has no openvswitch module")
    if args.only in (None, "oracle"):
        oracle_figures(10.0)


if __name__ == "__main__":
    main()
