"""Scenario files (YAML), validated before anything runs; errors name the field.

A scenario describes one experiment: the model and timing, the fat-tree, the workload,
background traffic, the oracle, which schedulers to compare, how many seeds, and an
optional `sweep` (dotted field -> list of values) whose cartesian product makes the
points of the experiment's table. Every point is validated when the file is loaded.

One section per module, as Faucet keeps one config concept per file: `cluster` (model,
timing, fat-tree), `workload`, `network` (background, TCP, oracle), `emulation`, `ns3`,
`policies` (recovery, FlowKV, reuse, faults), `schema` (the whole scenario and its
sweep points), `loading` (files, overrides, paths); `base` holds what they share.
"""

from testbed.scenario.base import GB, MAX_CELLS, MAX_GPUS, ScenarioError
from testbed.scenario.cluster import ClusterCfg, CustomModel, TimingCfg
from testbed.scenario.emulation import EmulationCfg
from testbed.scenario.loading import _format_errors, load_scenario, resolve_path
from testbed.scenario.network_cfg import BackgroundCfg, NetworkCfg, OracleCfg, TcpCfg
from testbed.scenario.ns3 import Ns3Cfg
from testbed.scenario.policies import FaultCfg, FlowKVCfg, RecoveryCfg, ReuseCfg
from testbed.scenario.schema import Scenario
from testbed.scenario.workload import TraceSynthCfg, WorkloadCfg

__all__ = [
    "GB", "MAX_CELLS", "MAX_GPUS", "BackgroundCfg", "ClusterCfg", "CustomModel",
    "EmulationCfg", "FaultCfg", "FlowKVCfg", "NetworkCfg", "Ns3Cfg", "OracleCfg", "RecoveryCfg",
    "ReuseCfg", "Scenario", "ScenarioError", "TcpCfg", "TimingCfg", "TraceSynthCfg",
    "WorkloadCfg", "_format_errors", "load_scenario", "resolve_path",
]
