"""Run a scenario on packets (root: Mininet + Open vSwitch) and read what the wire did.

    sudo .venv/bin/python examples/emulate.py [SCENARIO] [OUT]
"""

import sys

from testbed import emulate, load_scenario

scenario = load_scenario(sys.argv[1] if len(sys.argv) > 1 else "scenarios/validate.yaml",
                         {"workload.measure_s": 4, "workload.warmup_s": 1},
                         schedulers=["rr", "netkv-full"])
run = emulate(scenario, out=sys.argv[2] if len(sys.argv) > 2 else "results", progress=True)

print(run.requests.groupby("scheduler")["ttft"].mean().mul(1e3).round(1))  # ms
shards = run.transfers.assign(seconds=run.transfers.end - run.transfers.start)
print(shards.groupby(["scheduler", "tier"])["seconds"].median().mul(1e3).round(1))
print("faithful:", run.summary["all_faithful"], "| records:", run.folder)
