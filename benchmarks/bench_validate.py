"""Packet-vs-flow fidelity figures (root, Open vSwitch): printed, never asserted.

Runs `testbed validate` on scenarios/validate.yaml (RAG at 100% load, RR / CLA* /
NetKV-Full) once per time-dilation factor, side by side in one invocation, and prints
for each: the fidelity verdicts, the calibration, the per-transfer error of the replay
and of the free-running engines, mean TTFT per scheduler in both engines, whether both
rank the schedulers the same, and the wall time. The NetKV paper's own flow estimator
overestimated mean TTFT by 9-13% against its packet-level model; the targets here are a
median per-transfer error and a mean-TTFT difference of 10% or less after calibration.

Run: sudo .venv/bin/python benchmarks/bench_validate.py [--dilations 1,2] [--measure 12]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from testbed.scenario import load_scenario
from testbed.validate.pipeline import validate

ROOT = Path(__file__).resolve().parent.parent


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dilations", default="1,2")
    ap.add_argument("--measure", type=float, default=12.0, help="measurement seconds")
    ap.add_argument("--out", default="/tmp/netkv-bench-validate")
    args = ap.parse_args()
    for d in (float(x) for x in args.dilations.split(",")):
        sc = load_scenario(ROOT / "scenarios" / "validate.yaml",
                           {"emulation.time_dilation": d, "workload.measure_s": args.measure})
        t0 = time.perf_counter()
        folder = validate(sc, Path(args.out))
        wall = time.perf_counter() - t0
        doc = json.loads((folder / "comparison.json").read_text())
        t = doc["targets"]
        print(f"\n== time dilation {d:g} ({wall:.0f} s wall) -> {folder}")
        print("fidelity:", json.dumps(doc["fidelity"]))
        print("capacity factors:", doc["calibration"]["capacity_factor"])
        for key in ("replay_uncalibrated", "replay_calibrated", "engines_uncalibrated",
                    "engines_calibrated"):
            s = doc["transfers"][key]
            print(f"  per-transfer {key:22s} n={s['n']:4d} median |err| "
                  f"{100 * s['median_abs_error']:.1f}%  bias {pct(s['mean_error'])}")
        for point, data in doc["calibrated"].items():
            for m in data["metrics"]:
                print(f"  {point} {m['scheduler']:11s} TTFT packets {m['ttft_mean_ms_reference']:.0f}"
                      f" ms flow {m['ttft_mean_ms_model']:.0f} ms ({pct(m['ttft_mean_ms_error'])})")
            r = data["ranking"]
            print(f"  ranking packets {r['reference']} flow {r['model']} same={r['same_order']}")
        print(f"  targets: replay median {100 * t['replay_median_abs_transfer_error']:.1f}% "
              f"(<= 10%), worst TTFT {pct(t['worst_mean_ttft_error'])} (<= 10%), "
              f"same ranking {t['same_ranking']}")


if __name__ == "__main__":
    main()
