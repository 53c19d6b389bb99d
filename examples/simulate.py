"""Run a scenario in the flow-level simulator and look at it as DataFrames.

    .venv/bin/python examples/simulate.py [SCENARIO] [OUT]
"""

import sys

from testbed import load_scenario, simulate

scenario = load_scenario(sys.argv[1] if len(sys.argv) > 1 else "scenarios/default.yaml",
                         {"workload.measure_s": 10}, seeds=1)
run = simulate(scenario, out=sys.argv[2] if len(sys.argv) > 2 else "results")

served = run.requests[run.requests.measured & run.requests.ttft.notna()]
print(served.groupby("scheduler")[["ttft", "tbt"]].mean().mul(1e3).round(1))  # ms
print(served.groupby(["scheduler", "tier"]).size().unstack(fill_value=0))  # decisions per tier
print(run.rows[["scheduler", "ttft_mean_ms", "ttft_p99_ms", "slo_attainment"]])
print(f"records: {run.folder}")
