"""Priority fidelity of the emulated fabric (root): two classes saturating one link.

Two iperf3 streams from different hosts cross the one core link between the pods at
once. Two set-ups, each on its own fabric:

1. classes: one stream KV (AF41, HTB class 1:20, prio 1, guaranteed 60%), one best
   effort (class 1:30, prio 2, guaranteed 35%). HTB gives each class its guarantee and
   lends the excess in prio order, so the expected split is ~65:35 (KV also borrows the
   idle control class's 5%); strict priority would be 100:0.
2. levels (issue 7): both streams KV, one at priority level 0 and one at level K-1 (MFS
   levels: leaves of the kv class, each guaranteed LEVEL_SHARE of it, ceil = link). The
   configured split is (1 - LEVEL_SHARE x 60%) : (LEVEL_SHARE x 60%), ~99.4:0.6;
   strict priority would be 100:0. Then the same with the hosts swapped.

Prints each stream's share beside the configured and the strict-priority split.
Run: sudo .venv/bin/python benchmarks/bench_priority.py [--seconds 6]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import yaml

from testbed.cli.common import handle_signals
from testbed.emulation.net import EmulatedNetwork
from testbed.scenario import load_scenario
from testbed.topologies.traffic_classes import BACKGROUND, CONTROL, KV, LEVEL_SHARE, level_tos

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
LEVELS = 8


def measure(policy: str, flows: list[tuple[str, str, int]], seconds: float) -> list[float]:
    """flows: (src, dst, tos); returns received bits/s per flow, run at once."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(yaml.safe_dump({
            "name": "bench-priority", "workload": {"trace": str(TRACE)},
            "cluster": {"gpus_per_server": 4, "aggs_per_pod": 1, "cores_per_agg": 1},
            "network": {"flow_policy": policy, "ecmp": "per-pair"},
            "emulation": {"scale": 2e-4}}))
        sc = load_scenario(path)
        with EmulatedNetwork(sc, path, Path(tmp) / "run") as net:
            ports = [5301 + k for k in range(len(flows))]
            for (_, dst, _), port in zip(flows, ports, strict=True):
                net.host(dst).cmd(f"iperf3 -s -D -1 -p {port}")
            time.sleep(0.5)
            procs = [net.host(src).popen(
                f"iperf3 -c {net.host(dst).IP()} -p {port} -t {seconds} -O 1 "
                f"--tos {tos} -J".split()) for (src, dst, tos), port in zip(flows, ports,
                                                                           strict=True)]
            rates = []
            for proc in procs:
                out, _ = proc.communicate(timeout=seconds + 30)
                rates.append(json.loads(out)["end"]["sum_received"]["bits_per_second"])
            core = net.fabric.rate_bps(sc.cluster.spec().tier_bandwidth_gbps[3])
    print(f"  core link {core / 1e6:.2f} Mbit/s; received {sum(rates) / 1e6:.2f} Mbit/s "
          f"({100 * sum(rates) / core:.1f}% of the link)")
    return rates


def report(labels, rates, configured, strict) -> None:
    total = sum(rates)
    for label, rate, conf, st in zip(labels, rates, configured, strict, strict=True):
        print(f"  {label:22s} {rate / 1e6:6.2f} Mbit/s = {100 * rate / total:5.1f}% "
              f"(configured {100 * conf:.1f}%, strict priority {100 * st:.0f}%)")


def main() -> None:
    handle_signals()  # SIGTERM tears the fabric down as Ctrl-C does
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    print("classes: KV (AF41) vs best effort")
    rates = measure("fair", [("i0", "i4", KV.tos), ("i1", "i5", BACKGROUND.tos)], args.seconds)
    report(["KV (AF41)", "best effort"], rates,
           [KV.share + CONTROL.share, BACKGROUND.share], [1, 0])
    low_share = LEVEL_SHARE * KV.share
    for hi, lo in ((("i0", "i4"), ("i1", "i5")), (("i1", "i5"), ("i0", "i4"))):
        print(f"levels: level 0 from {hi[0]} vs level {LEVELS - 1} from {lo[0]}")
        rates = measure("mfs", [(*hi, level_tos(0, LEVELS)),
                                (*lo, level_tos(LEVELS - 1, LEVELS))], args.seconds)
        report(["level 0", f"level {LEVELS - 1}"], rates, [1 - low_share, low_share], [1, 0])


if __name__ == "__main__":
    main()
