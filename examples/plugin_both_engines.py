"""Your scheduler in both engines: the p2c plugin beside NetKV, flows then packets (root).

    .venv/bin/pip install --no-build-isolation --no-deps examples/p2c_plugin
    sudo .venv/bin/python examples/plugin_both_engines.py [SCENARIO] [OUT]
"""

import sys

import pandas as pd

from testbed import emulate, load_scenario, simulate

scenario = load_scenario(sys.argv[1] if len(sys.argv) > 1 else "scenarios/validate.yaml",
                         {"workload.measure_s": 4, "workload.warmup_s": 1},
                         schedulers=["netkv-full", "p2c"])  # p2c: the plugin's entry point
out = sys.argv[2] if len(sys.argv) > 2 else "results"
runs = {"flows": simulate(scenario, out), "packets": emulate(scenario, out)}

ttft = pd.DataFrame({engine: run.requests.groupby("scheduler")["ttft"].mean() * 1e3
                     for engine, run in runs.items()})
print(ttft.round(1))  # mean TTFT (ms) per scheduler in each engine
