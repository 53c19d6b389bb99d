"""KVRS crossover: analytical, flow model and packets side by side (printed, not asserted).

The crossover queue depth q* is where recomputing behind q queued requests (each ~60 ms,
the seed's intra-node figure) costs as much as migrating the KV over the network:
q* = (T_migrate - T_prefill(L)) / 60 ms. T_migrate comes from three places:
  analytical  KV bytes x 8 / tier bandwidth (testbed/model/recovery.py)
  flow model  the same transfer replayed through the fluid network (4 shards, pair path)
  packets     a lone transfer timed on the emulated fabric (root; `--no-fabric` skips it)
OPT-13B (800 KB/token) with the seed's prefill table; tiers 2 (50 Gbps) and 3 (25 Gbps).
The seed reports its measured crossover within 2% of its analytical one.

Run: sudo .venv/bin/python benchmarks/bench_recovery.py [--no-fabric]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from testbed.model.kv import MODEL_PRESETS, kv_cache_bytes
from testbed.model.recovery import OPT13B_PREFILL, crossover_curve, crossover_queue_depth, migrate_cost
from testbed.scenario import load_scenario
from testbed.validate.engines.flow_replay import replay_transfers

ROOT = Path(__file__).resolve().parent.parent
PER_REQUEST_S = 0.060
REPEATS = 3  # packets: the median of three lone transfers per size
LENGTHS = (1024, 1477, 2048, 4096)  # 1477 tokens = the seed's 1.21 GB cache
MODEL = MODEL_PRESETS["opt-13b"]


def flow_model_seconds(spec, src: str, dst: str, size: float, shards: int = 4) -> float:
    hops = spec.paths(src, dst)[0]
    nodes = ">".join([hops[0][0]] + [h[1] for h in hops])
    rows = [{"request": "x", "shard": k, "src": src, "dst": dst, "bytes": size / shards,
             "start": 0.0, "path": nodes} for k in range(shards)]
    return max(r["end"] for r in replay_transfers(spec, rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-fabric", action="store_true", help="skip the packet measurement")
    args = ap.parse_args()
    print("analytical crossover depth q* (requests) by bandwidth x prompt length:")
    curve = crossover_curve(lambda n: kv_cache_bytes(MODEL, n), OPT13B_PREFILL,
                            [10e9, 25e9, 50e9, 100e9], [512, 1024, 2048, 4096, 8192],
                            PER_REQUEST_S)
    for row in curve:
        print(f"  {row['bandwidth_gbps']:5.0f} Gbps  {row['tokens']:5d} tokens  "
              f"q* = {row['crossover_queue']:7.2f}")
    print(f"seed check: 1.21 GB over 25 Gbps = {1e3 * migrate_cost(1.21e9, 25e9):.0f} ms")

    sc = load_scenario(ROOT / "scenarios" / "default.yaml", {"model": "opt-13b"})
    spec = sc.cluster.spec()
    pairs = {2: ("i0", "i4"), 3: ("i0", "i8")}
    measured: dict[tuple[int, int], float] = {}
    if not args.no_fabric:
        from testbed.emulation.net import EmulatedNetwork
        from testbed.topologies.replica import scaled_bytes
        from testbed.validate.engines.fabric_probes import measure_tier

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "s.yaml"
            path.write_text(yaml.safe_dump(sc.model_dump(mode="json")))
            with EmulatedNetwork(sc, path, Path(tmp) / "run") as net:
                for tier, (src, dst) in pairs.items():
                    sizes = [scaled_bytes(kv_cache_bytes(MODEL, n), sc.emulation.scale)
                             for n in LENGTHS] * REPEATS
                    got = measure_tier(net, src, dst, sizes, 4)
                    for k, n in enumerate(LENGTHS):
                        runs = sorted(secs for _, secs, _ in got[k::len(LENGTHS)])
                        measured[(tier, n)] = runs[len(runs) // 2] / sc.emulation.time_dilation
    print("\nmigrate time and crossover depth: analytical | flow model | packets")
    for tier, (src, dst) in pairs.items():
        bw = spec.tier_bandwidth_gbps[tier] * 1e9
        for n in LENGTHS:
            size = kv_cache_bytes(MODEL, n)
            t_an = migrate_cost(size, bw)
            t_fl = flow_model_seconds(spec, src, dst, size)
            t_pk = measured.get((tier, n))
            q = [crossover_queue_depth(size, bw, n, OPT13B_PREFILL, PER_REQUEST_S)]
            q += [(t - OPT13B_PREFILL.time(n)) / PER_REQUEST_S if t is not None else None
                  for t in (t_fl, t_pk)]
            err = (f"{100 * (q[2] - q[0]) / q[0]:+.1f}%" if q[2] is not None and q[0] else "-")
            print(f"  tier {tier} {n:5d} tok {size / 1e9:5.2f} GB: "
                  f"{1e3 * t_an:6.0f} | {1e3 * t_fl:6.0f} | "
                  f"{'-' if t_pk is None else f'{1e3 * t_pk:6.0f}'} ms;  q* "
                  f"{q[0]:6.2f} | {q[1]:6.2f} | {'-' if q[2] is None else f'{q[2]:6.2f}'}"
                  f"  (packets vs analytical {err})")


if __name__ == "__main__":
    main()
