"""Priority fidelity of the emulated fabric (root): two classes saturating one link.

Two TCP streams from different hosts cross the same core link at once, one marked KV
(AF41, HTB class 1:20, prio 1, guaranteed 60%) and one best-effort (class 1:30, prio 2,
guaranteed 35%); both may borrow up to the link rate. Strict priority would give the KV
stream everything; HTB gives each class its guarantee and lends the excess in prio
order, so the expected split is ~65:35 (KV also borrows the idle control class's 5%).
Prints each stream's share against both references. Issue 7's K-level mapping builds on
this: it is how well this kernel (no prio qdisc) approximates strict priority.

Run: sudo .venv/bin/python benchmarks/bench_priority.py [--seconds 6]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import yaml

from testbed.emulation.net import EmulatedNetwork
from testbed.scenario import load_scenario
from testbed.topologies.traffic_classes import BACKGROUND, CONTROL, KV

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(yaml.safe_dump({
            "name": "bench-priority", "workload": {"trace": str(TRACE)},
            "cluster": {"gpus_per_server": 4, "aggs_per_pod": 1, "cores_per_agg": 1},
            "emulation": {"scale": 2e-4}}))
        sc = load_scenario(path)
        with EmulatedNetwork(sc, path, Path(tmp) / "run") as net:
            spec = sc.cluster.spec()
            core = net.fabric.rate_bps(spec.tier_bandwidth_gbps[3])
            pairs = [("i0", "i4", 5301, KV.tos), ("i1", "i5", 5302, BACKGROUND.tos)]
            for _, dst, port, _ in pairs:
                net.host(dst).cmd(f"iperf3 -s -D -1 -p {port}")
            time.sleep(0.5)
            procs = [net.host(src).popen(
                f"iperf3 -c {net.host(dst).IP()} -p {port} -t {args.seconds} -O 1 "
                f"--tos {tos} -J".split()) for src, dst, port, tos in pairs]
            rates = []
            for proc in procs:
                out, _ = proc.communicate(timeout=args.seconds + 30)
                rates.append(json.loads(out)["end"]["sum_received"]["bits_per_second"])
    total = sum(rates)
    expected_kv = KV.share + CONTROL.share
    print(f"core link {core / 1e6:.2f} Mbit/s; received {total / 1e6:.2f} Mbit/s "
          f"({100 * total / core:.1f}% of the link)")
    for (label, share), rate in zip((("KV (AF41)", expected_kv),
                                     ("best effort", BACKGROUND.share)), rates, strict=True):
        print(f"  {label:12s} {rate / 1e6:6.2f} Mbit/s = {100 * rate / total:5.1f}% "
              f"(HTB expectation {100 * share:.0f}%, strict priority "
              f"{100 if label.startswith('KV') else 0}%)")


if __name__ == "__main__":
    main()
