"""The flow simulator's compiled max-min sharing against the Python one (the reference),
on every shipped scenario at its own seeds: what moved, and what each took.

Both sharings compute the same max-min allocation; the compiled one sums in another
order, so rates differ by ulps and a tie may break the other way. Per scenario, sweep
point and scheduler it compares mean and P99 TTFT, SLO attainment and tier shares, and
flags a figure that moved by more than 0.5% and by more than its seed-to-seed spread
(the std over seeds). Each side is one `testbed simulate` of all the scenarios (records
written), timed, with NETKV_FLOWSIM_NATIVE=0 for the Python side.

Run: .venv/bin/python benchmarks/bench_sharing.py [--jobs N] [scenarios/x.yaml ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("ttft_mean_ms", "ttft_p99_ms", "slo_attainment")
TOLERANCE = 0.005


def run_all(paths: list[Path], out: Path, native: bool, jobs: str) -> float:
    env = {**os.environ, "NETKV_FLOWSIM_NATIVE": "1" if native else "0"}
    t0 = time.perf_counter()
    subprocess.run([str(ROOT / ".venv" / "bin" / "testbed"), "simulate", *map(str, paths),
                    "--out", str(out), "--quiet", "--jobs", jobs], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def rows_of(out: Path) -> dict[str, dict]:
    """scenario name -> {(point, scheduler): row} from each run folder's summary.json."""
    got = {}
    for folder in sorted(out.iterdir()):
        summary = json.loads((folder / "summary.json").read_text())
        name = folder.name.split("-flowsim-")[0]
        got[name] = {(json.dumps(r["point"], sort_keys=True), r["key"]): r
                     for r in summary["rows"]}
    return got


def moved(a: float | None, b: float | None) -> float:
    if a is None or b is None or a != a or b != b:
        return 0.0 if (a is None) == (b is None) else float("inf")
    return abs(b - a) / max(abs(a), 1e-12)


def compare(py: dict, c: dict) -> list[str]:
    """One line per scenario: the largest move of each figure; flagged rows after it."""
    lines = ["| scenario | rows | mean TTFT | P99 TTFT | SLO | tier shares | past 0.5% and "
             "the seed spread |", "|---|---|---|---|---|---|---|"]
    for name in sorted(py):
        worst = dict.fromkeys((*FIGURES, "tier_share"), 0.0)
        flagged = []
        for key, a in py[name].items():
            b = c[name][key]
            for fig in FIGURES:
                m = moved(a[fig], b[fig])
                worst[fig] = max(worst[fig], m)
                spread = max(a.get(f"{fig}_std") or 0.0, b.get(f"{fig}_std") or 0.0)
                if m > TOLERANCE and abs((b[fig] or 0) - (a[fig] or 0)) > spread:
                    flagged.append(f"{key[1]} {key[0]} {fig} {a[fig]:.4g} -> {b[fig]:.4g}")
            tiers = set(a["tier_share"]) | set(b["tier_share"])
            worst["tier_share"] = max([worst["tier_share"]] + [
                abs(a["tier_share"].get(t, 0.0) - b["tier_share"].get(t, 0.0)) for t in tiers])
        lines.append(f"| {name} | {len(py[name])} | {worst['ttft_mean_ms']:.1e} | "
                     f"{worst['ttft_p99_ms']:.1e} | {worst['slo_attainment']:.1e} | "
                     f"{worst['tier_share']:.1e} | {'; '.join(flagged) or 'none'} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("scenarios", nargs="*", type=Path)
    ap.add_argument("--jobs", default="1", help="testbed simulate --jobs (default 1)")
    args = ap.parse_args()
    paths = args.scenarios or sorted((ROOT / "scenarios").glob("*.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        walls = {}
        for native in (False, True):
            out = Path(tmp) / ("compiled" if native else "python")
            walls[native] = run_all(paths, out, native, args.jobs)
            print(f"{'compiled' if native else 'Python'} sharing: {len(paths)} scenarios, "
                  f"{walls[native]:.1f} s wall (jobs {args.jobs})", flush=True)
        lines = compare(rows_of(Path(tmp) / "python"), rows_of(Path(tmp) / "compiled"))
    print("\n".join(lines))
    print(f"the largest relative move of each figure per scenario (tier shares: absolute); "
          f"compiled / Python wall: {walls[True] / walls[False]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
