"""Validation: the flow model judged against packets, and packets against packets.

Rooms, lowest first (a room imports only from rooms below it; tests/test_layers.py):

judging/      pure statistics, errors, claims, decisions and their words
engines/      the engines and probes a validation drives: calibration probes, replays,
              repeats, the flow model's matched scenario, this machine's cache
comparison/   comparison.json: the typed document and the sections computed into it
report/       what a person reads: report.md, plots, the answer, `testbed compare`,
              workload exports and other simulators' predictions
pipelines/    `testbed validate` / `testbed judge` end to end: one per packet engine,
              three-way, sequential rounds, other flow models
"""
