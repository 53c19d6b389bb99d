"""Packets vs the flow model from a script (root): verdicts and the transfer errors.

    sudo .venv/bin/python examples/validate.py [SCENARIO] [OUT] [CALIBRATION]

Without CALIBRATION (a calibration.json from `testbed calibrate` or an earlier
validation, taken at the scenario's scale and time dilation) the fabric is measured first.
"""

import sys

from testbed import load_scenario, validate

args = sys.argv[1:] + [None] * 3
scenario = load_scenario(args[0] or "scenarios/validate.yaml")
result = validate(scenario, out=args[1] or "results", calibration=args[2], progress=True,
                  packets="emulation")

print("\n".join(result.answer_lines()))  # summary_lines(): every figure
replay = result.comparison["transfers"]["replay_calibrated"]
print(f"replayed transfers: n={replay['n']}, median |error| {100 * replay['median_abs_error']:.1f}%")
print(result.emulation.rows[["scheduler", "ttft_mean_ms"]])
print(f"report: {result.report}")
