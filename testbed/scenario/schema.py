"""The whole scenario: its sections, the cross-field checks, the factories both
engines build from it, and the cells of a sweep."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from pydantic import Field, field_validator, model_validator

from testbed import plausibility
from testbed.model.extensions import plugins
from testbed.model.kv import MODEL_PRESETS, ModelSpec
from testbed.model.schedulers import switches_roles
from testbed.model.tcp import TcpParams, emulation_equivalent
from testbed.model.timing import TimingModel
from testbed.scenario.base import DAY_S, MAX_CELLS, ScenarioError, _Strict
from testbed.scenario.cluster import ClusterCfg, CustomModel, TimingCfg
from testbed.scenario.emulation import EmulationCfg
from testbed.scenario.network_cfg import NetworkCfg, OracleCfg
from testbed.scenario.ns3 import Ns3Cfg
from testbed.scenario.policies import FaultCfg, FlowKVCfg, RecoveryCfg, ReuseCfg
from testbed.scenario.workload import WorkloadCfg
from testbed.topologies.captured import capture_error
from testbed.topologies.traffic_classes import ENGINE_PORT_OFFSET, ENGINE_PORTS, engine_ports_usable
from testbed.workloads.profiles import CLA_WEIGHTS, PROFILES


class Scenario(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=100,
                      description="names the run folders (with a stamp: within a file name)")
    description: str = Field("", max_length=10000, description="free text kept with the run")
    seed: int = Field(1, ge=0, le=2**32 - 1, description=(
        "the first seed; `seeds` runs seed, seed+1, ..."))
    seeds: int = Field(1, ge=1, le=1000, description="repetitions with seeds seed, seed+1, ...")
    schedulers: list[str] = Field(["rr", "cla", "netkv-full"], max_length=64, description=(
        "built-in keys, installed plugins' entry-point names, or 'module:Class'"))
    scheduler_timeout_ms: float = Field(100.0, gt=0, le=60_000, description=(
        "a plugin scheduler's decision past this is thrown away and the request placed by "
        "LA (reported); a decision that never returns is interrupted"))
    cla_weights: tuple[float, float] | None = Field(None, description=(
        "CLA*'s (cache, load) weights; default: the workload profile's"))
    model: str | CustomModel = Field("llama-3-70b", description=(
        "a preset's name (e.g. llama-3-70b) or a custom model's shape"))
    timing: TimingCfg = TimingCfg()
    cluster: ClusterCfg = ClusterCfg()
    workload: WorkloadCfg = WorkloadCfg()
    network: NetworkCfg = NetworkCfg()
    oracle: OracleCfg = OracleCfg()
    emulation: EmulationCfg = EmulationCfg()
    ns3: Ns3Cfg = Ns3Cfg()
    recovery: RecoveryCfg = RecoveryCfg()
    reuse: ReuseCfg = ReuseCfg()
    flowkv: FlowKVCfg = FlowKVCfg()
    faults: list[FaultCfg] = []
    drain_s: float = Field(300.0, gt=0, le=DAY_S, description="max time after the last arrival")
    sweep: dict[str, list[Any]] = Field({}, description=(
        "dotted field -> list of values: one sweep point per combination"))

    @field_validator("schedulers")
    @classmethod
    def _known_schedulers(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("list at least one scheduler")
        for key in v:
            if not plugins.is_builtin(key):
                plugins.resolve(key)  # imported and checked now, not mid-run
        if len(set(v)) != len(v):
            raise ValueError("a scheduler is listed twice")
        return v

    @model_validator(mode="after")
    def _physically_possible(self) -> Scenario:
        if problems := plausibility.scenario_problems(self):
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _ovs_instances_fit(self) -> Scenario:
        emu = self.emulation
        if emu.private_ovs and emu.datapath == "kernel":
            raise ValueError("emulation.private_ovs runs the switches on private userspace "
                             "daemons; set emulation.datapath: user (or auto)")
        if emu.ovs_instances != "auto" and emu.ovs_instances > 1:
            if emu.datapath == "kernel":
                raise ValueError("emulation.ovs_instances splits the userspace datapath; the "
                                 "kernel datapath forwards on every core already (use 1)")
            switches = self.cluster.spec().n_switches
            if emu.ovs_instances > switches:
                raise ValueError(f"emulation.ovs_instances {emu.ovs_instances} exceeds the "
                                 f"fabric's {switches} switches")
        return self

    @model_validator(mode="after")
    def _transport_can_carry(self) -> Scenario:
        """What Mooncake's Transfer Engine cannot do on the replica, refused before a run."""
        if self.emulation.kv_transport != "mooncake":
            return self
        checks = (
            (self.kv_levels() > 0, "network.flow_policy / emulation.layer_chunks",
             "the engine's sockets carry no DSCP and cannot change it per layer chunk, so "
             "priority levels (MFS, Karuna, ...) cannot ride it"),
            (self.reuse.enabled, "reuse.enabled",
             "KV-reuse fetches (holder to prefill) run on the pusher only"),
            (self.network.transfer_mode != "contiguous", "network.transfer_mode",
             "one write per shard is the engine's unit; segment and block calls are the "
             "pusher's"),
            (any(map(switches_roles, self.schedulers)), "schedulers",
             "role switching (FlowKV) sends KV from decode instances, which hold no sending "
             "engine"),
            (not engine_ports_usable(self.emulation.kv_port), "emulation.kv_port",
             f"the engine's ports (kv_port + {ENGINE_PORT_OFFSET} and the {ENGINE_PORTS - 1} "
             "after it) must lie in 1024-32767 or 61000-65535, as it takes no others"),
        )
        if why := [f"{field} with emulation.kv_transport mooncake: {reason}"
                   for bad, field, reason in checks if bad]:
            raise ValueError("; ".join(why))
        return self

    @model_validator(mode="after")
    def _fault_targets_exist(self) -> Scenario:
        spec = self.cluster.spec()
        decodes = {i.name for i in spec.decode_pool}
        tors = set(spec.switches["tor"])
        links = {f"{lk.a}-{lk.b}" for lk in spec.links} | {f"{lk.b}-{lk.a}" for lk in spec.links}
        for k, fault in enumerate(self.faults):
            where = f"faults.{k}.target"
            if fault.kind == "decode_down" and fault.target not in decodes:
                raise ValueError(f"{where}: {fault.target!r} is not a decode instance "
                                 f"({', '.join(sorted(decodes))})")
            if fault.kind == "tor_down" and fault.target not in tors:
                raise ValueError(f"{where}: {fault.target!r} is not a ToR ({', '.join(sorted(tors))})")
            if fault.kind == "link_down" and fault.target not in links:
                raise ValueError(f"{where}: {fault.target!r} is not a link 'a-b' of the fabric "
                                 "(testbed topology SCENARIO --links lists them)")
        for k, name in enumerate(self.emulation.capture):
            if (why := capture_error(spec, name)) is not None:
                raise ValueError(f"emulation.capture.{k}: {why}")
        return self

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str | CustomModel) -> str | CustomModel:
        if isinstance(v, str) and v not in MODEL_PRESETS:
            raise ValueError(f"unknown model preset {v!r}; choose from {', '.join(MODEL_PRESETS)}")
        return v

    @field_validator("sweep")
    @classmethod
    def _sweep_lists(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        cells = 1
        for key, values in v.items():
            if not values:
                raise ValueError(f"sweep '{key}' has no values")
            if any(not part.strip() for part in key.split(",")) or \
                    any(not p for part in key.split(",") for p in part.strip().split(".")):
                raise ValueError(f"sweep key '{key}' has an empty field name (give "
                                 "dotted.field or several separated by commas)")
            if key.split(".")[0] in ("sweep", "name", "seeds", "schedulers"):
                raise ValueError(f"sweep '{key}' cannot vary that field")
            cells *= len(values)
        if cells > MAX_CELLS:
            raise ValueError(f"the sweep has {cells:,} points, more than {MAX_CELLS:,} (each "
                             "is validated and run): split it into several scenarios")
        return v

    # -- derived objects ---------------------------------------------------------------
    def model_spec(self) -> ModelSpec:
        if isinstance(self.model, str):
            return MODEL_PRESETS[self.model]
        return ModelSpec(**self.model.model_dump())

    def timing_model(self) -> TimingModel:
        return TimingModel(**self.timing.model_dump())

    def tcp_params(self) -> TcpParams | None:
        """The flow model's TCP terms, or None for the pure fluid model."""
        if self.network.flow_model != "tcp":
            return None
        t = self.network.tcp
        if t.replica:
            emu = self.emulation
            base = emulation_equivalent(emu.scale, emu.time_dilation, t.hop_delay_us * 1e-6,
                                        t.init_cwnd, t.serialisation, emu.frame_bytes)
            return replace(base, handshake_rtts=t.handshake_rtts, tail_rtts=t.tail_rtts,
                           shard_spread=t.shard_spread, contention_idle=t.contention_idle,
                           seniority_s=t.seniority_s, join_stall_s=t.join_stall_s)
        return TcpParams(t.mss_bytes, t.init_cwnd, t.handshake_rtts, t.tail_rtts,
                         t.hop_delay_us * 1e-6, t.serialisation, t.shard_spread,
                         t.contention_idle, t.seniority_s, t.join_stall_s)

    def profile(self):
        return PROFILES[self.workload.profile]

    def slo_s(self) -> float:
        return self.workload.slo_s or self.profile().slo_s

    def p_share(self) -> float | None:
        if self.workload.p_share is not None:
            return self.workload.p_share
        return self.profile().p_share

    def cla(self) -> tuple[float, float]:
        return self.cla_weights or CLA_WEIGHTS[self.workload.profile]

    def kv_levels(self) -> int:
        """Priority levels the emulated fabric needs for KV (0: one KV class, AF41)."""
        if self.network.flow_policy != "fair" or self.emulation.layer_chunks:
            return self.network.priority_levels
        return 0

    def fabric(self):
        from testbed.topologies.fabric import Fabric

        return Fabric(self.cluster.spec(), self.emulation.scale, self.emulation.time_dilation)

    def points(self) -> list[tuple[dict[str, Any], Scenario]]:
        """(sweep point, scenario with the point applied), in a stable order."""
        if not self.sweep:
            return [({}, self)]
        keys = list(self.sweep)
        out = []
        for values in itertools.product(*(self.sweep[k] for k in keys)):
            point = dict(zip(keys, values, strict=True))
            fields = {f.strip(): v for k, v in point.items() for f in k.split(",")}
            out.append((point, self.with_overrides(fields, keep_sweep=False)))
        return out

    def with_overrides(self, overrides: dict[str, Any], keep_sweep: bool = True) -> Scenario:
        data = self.model_dump(mode="json")
        for dotted, value in overrides.items():
            _set_dotted(data, dotted, value)
        if not keep_sweep:
            data["sweep"] = {}
        return Scenario.model_validate(data)


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            raise ScenarioError(f"'{dotted}': no section '{part}'")
        node = node[part]
    if parts[-1] not in node:
        raise ScenarioError(f"'{dotted}': no field '{parts[-1]}'")
    node[parts[-1]] = value
