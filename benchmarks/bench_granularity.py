"""Transfer granularity on the emulated fabric (root): time vs send calls, packets beside
the flow model.

One shard of fixed size crosses the fabric from i0 to i4 (same pod) as 1, 4, 16, ...
framed send calls, each acknowledged before the next (kvstream's block-wise mode, what a
blocking send per PagedAttention block costs). The median of --reps runs per point is
fitted to T(n) = T(1) + (n - 1) x per_call_s; the flow model's curve is that line, with
per_call_s in modelled seconds (= wall seconds here: time dilation 1), and the flow
model's curve is what the flow simulator computes for a lone transfer: the bytes at the
path's tier rate plus granularity.call_overhead_s(n, per_call_s). Then FlowKV's
comparison: 23,469 calls per request (its layer-wise baseline) against 1, extrapolated
on the fitted line, beside FlowKV's 0.944 s -> 0.053 s.

Run: sudo .venv/bin/python benchmarks/bench_granularity.py [--bytes 390000] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from testbed.cli.common import handle_signals
from testbed.emulation.net import EmulatedNetwork
from testbed.model.granularity import call_overhead_s
from testbed.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "data" / "traces" / "mooncake_synthetic_trace.jsonl"
CALLS = [1, 4, 16, 64, 256, 1024]
FLOWKV_CALLS, FLOWKV_BEFORE_S, FLOWKV_AFTER_S = 23_469, 0.944, 0.053


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of T = a + b x (n - 1): returns (a, b)."""
    xs = [n - 1 for n, _ in points]
    ys = [t for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> None:
    handle_signals()  # SIGTERM tears the fabric down as Ctrl-C does
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bytes", type=int, default=390_000,
                    help="wire bytes of the shard (default: a RAG shard at scale 2e-4)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(yaml.safe_dump({"name": "bench-granularity",
                                        "workload": {"trace": str(TRACE)},
                                        "emulation": {"scale": 2e-4}}))
        sc = load_scenario(path)
        with EmulatedNetwork(sc, path, Path(tmp) / "run") as net:
            dst = net.host("i4")
            recv = dst.popen([sys.executable, "-m", "testbed.workers.probe", "recv",
                              dst.IP(), "7411"], cwd=ROOT)
            assert recv.stdout.readline().strip() == b"ready"
            runs: dict[int, list[float]] = {n: [] for n in CALLS}
            for _ in range(args.reps):
                send = net.host("i0").popen(
                    [sys.executable, "-m", "testbed.workers.probe", "calls", dst.IP(), "7411",
                     "cubic", str(args.bytes), *map(str, CALLS)], cwd=ROOT)
                out, _ = send.communicate(timeout=1800)
                for line in out.decode().splitlines():
                    doc = json.loads(line)
                    runs[doc["calls"]].append(doc["seconds"])
            recv.terminate()
            recv.wait(timeout=10)
            spec = sc.cluster.spec()
            tier = spec.tier("i0", "i4")
            path_bps = net.fabric.rate_bps(spec.tier_bandwidth_gbps[tier])
    points = [(n, statistics.median(ts)) for n, ts in runs.items()]
    a, per_call = fit(points)
    lone = args.bytes * 8 / path_bps
    print(f"shard {args.bytes} wire bytes, i0 -> i4 (tier {tier}, {path_bps / 1e6:.0f} Mbit/s), "
          f"median of {args.reps}")
    print(f"fit: T(n) = {a:.3f} s + (n - 1) x {per_call * 1e3:.3f} ms; the bytes alone: "
          f"{lone:.3f} s")
    print(f"{'calls':>6} {'packets (s)':>12} {'flow model (s)':>15} {'error':>7}")
    for n, t in points:
        model = lone + call_overhead_s(n, per_call)
        print(f"{n:>6} {t:>12.3f} {model:>15.3f} {100 * (model - t) / t:>+6.1f}%")
    big = a + (FLOWKV_CALLS - 1) * per_call
    print(f"{FLOWKV_CALLS} calls vs 1 (extrapolated): {big:.2f} s vs {points[0][1]:.3f} s = "
          f"{big / points[0][1]:.1f}x; FlowKV: {FLOWKV_BEFORE_S} s vs {FLOWKV_AFTER_S} s = "
          f"{FLOWKV_BEFORE_S / FLOWKV_AFTER_S:.1f}x")
    print(f"network.per_call_s for the flow model: {per_call:.6f}")


if __name__ == "__main__":
    main()
