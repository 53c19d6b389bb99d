"""A sweep from a script: NetKV's gain over CLA* as the load grows, as a DataFrame.

    .venv/bin/python examples/sweep.py [SCENARIO] [OUT]

jobs=0 runs the cells on every core in fresh processes, which import this script again:
its work goes under `if __name__ == "__main__":`, as with any multiprocessing script.
"""

import sys

from testbed import load_scenario, simulate

if __name__ == "__main__":
    scenario = load_scenario(sys.argv[1] if len(sys.argv) > 1 else "scenarios/default.yaml",
                             {"workload.measure_s": 10}, seeds=1,
                             schedulers=["cla", "netkv-full"], sweep={"workload.load": [0.6, 1.0]})
    run = simulate(scenario, out=sys.argv[2] if len(sys.argv) > 2 else "results", jobs=0)

    table = run.rows.pivot(index="workload.load", columns="scheduler",
                           values="ttft_mean_ms")
    table["gain %"] = 100 * (1 - table["netkv-full"] / table["cla"])
    print(table.round(1))
