"""Run a scenario in the flow-level simulator and look at it as DataFrames.

    .venv/bin/python examples/simulate.py [SCENARIO] [OUT]
"""

import sys

from testbed import load_scenario, simulate

scenario = load_scenario(sys.argv[1] if len(sys.argv) > 1 else "scenarios/default.yaml",
                         {"workload.measure_s": 10}, seeds=1)
run = simulate(scenario, out=sys.argv[2] if len(sys.argv) > 2 else "results")

# run.measured: the requests the table judges (warm-up and unserved ones left out)
print(run.measured.groupby("name")[["ttft", "tbt"]].mean().mul(1e3).round(1))  # ms
print(run.measured.groupby(["name", "tier"]).size().unstack(fill_value=0))  # per tier
print(run.rows[["scheduler", "name", "ttft_mean_ms", "ttft_p99_ms", "slo_attainment"]])
print(f"records: {run.folder}")
