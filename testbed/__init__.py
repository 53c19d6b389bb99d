"""netkv-testbed: flow-level simulator and packet-level emulation of NetKV.

Scripted like Mininet:

    from testbed import load_scenario, simulate, emulate, validate
    run = simulate(load_scenario("scenarios/default.yaml", seeds=1))
    run.requests  # a pandas DataFrame

and extended with your own scheduler: subclass `testbed.Scheduler`, or your own network
model: subclass `testbed.NetworkModel` (docs/schedulers.md).
Names load on first use, so `import testbed` stays cheap for the CLI and the workers.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "load_scenario": "testbed.api", "simulate": "testbed.api", "simulate_all": "testbed.api",
    "emulate": "testbed.api",
    "validate": "testbed.api", "open_run": "testbed.api", "RunResult": "testbed.api",
    "ValidationResult": "testbed.api", "TooLarge": "testbed.api",
    "Scenario": "testbed.scenario", "ScenarioError": "testbed.scenario",
    "Scheduler": "testbed.model.schedulers", "SchedulerContext": "testbed.model.schedulers",
    "Candidate": "testbed.model.candidates", "CandidateTable": "testbed.model.candidates",
    "RequestInfo": "testbed.model.schedulers", "Decision": "testbed.model.schedulers",
    "Oracle": "testbed.model.oracle", "PluginError": "testbed.model.extensions.plugins",
    "NetworkModel": "testbed.model.extensions.network_models",
    "NetworkModelContext": "testbed.model.extensions.network_models",
    "Transfer": "testbed.model.extensions.network_models",
    "SharedFlow": "testbed.model.extensions.network_models",
    "Link": "testbed.model.extensions.network_models",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'testbed' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
