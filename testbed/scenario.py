"""Scenario files (YAML), validated before anything runs; errors name the field.

A scenario describes one experiment: the model and timing, the fat-tree, the workload,
background traffic, the oracle, which schedulers to compare, how many seeds, and an
optional `sweep` (dotted field -> list of values) whose cartesian product makes the
cells of the experiment's table. Every cell is validated when the file is loaded.
"""

from __future__ import annotations

import copy
import ipaddress
import itertools
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from testbed import plausibility, yamlfile
from testbed.clock import Dilation
from testbed.model import plugins
from testbed.model.kv import MODEL_PRESETS, ModelSpec
from testbed.model.tcp import TcpParams, emulation_equivalent
from testbed.model.timing import TimingModel
from testbed.topologies.captured import capture_error
from testbed.topologies.fattree import FatTreeSpec
from testbed.workloads.profiles import CLA_WEIGHTS, PROFILES

GB = 1e9


class ScenarioError(ValueError):
    """An invalid scenario; the message names the file and field."""


# Upper bounds are what one machine can hold: past them a run would hang or exhaust memory
# long before it said anything (a fabric of 10^4 pods, a million-cell sweep).
MAX_GPUS = 65536  # 8x the largest fabric measured (8192 GPUs: 1 GB, 34-59 s per minute)
MAX_CELLS = 10000  # sweep points; each is validated and run
DAY_S = 86400.0
MIN_PERIOD_S = 1e-3  # periodic events (refresh, change, cycle) at most 1000 per second
Latency = Annotated[float, Field(ge=0, le=1e6)]  # microseconds per tier


class _Strict(BaseModel):
    """No unknown fields, no NaN or infinity, no true/false where a number belongs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, value, info: ValidationInfo):
        if isinstance(value, bool) and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, got {str(value).lower()}")
        return value


def _numeric(annotation) -> bool:
    args = get_args(annotation) or (annotation,)
    return bool not in args and any(a in (int, float) for a in args)


class CustomModel(_Strict):
    name: str = "custom"
    n_layers: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0)
    d_head: int = Field(gt=0)
    bytes_per_elem: int = Field(2, gt=0)


class TimingCfg(_Strict):
    iter_base_s: float = Field(TimingModel.iter_base_s, ge=0, le=60)
    iter_per_seq_s: float = Field(TimingModel.iter_per_seq_s, ge=0, le=60)
    prefill_per_token_s: float = Field(TimingModel.prefill_per_token_s, ge=0, le=60)
    prefill_base_s: float = Field(TimingModel.prefill_base_s, ge=0, le=3600)

    @model_validator(mode="after")
    def _time_passes(self) -> TimingCfg:
        if self.iter_base_s + self.iter_per_seq_s <= 0:
            raise ValueError("iter_base_s and iter_per_seq_s are both 0: a decode iteration "
                             "would take no time")
        if self.prefill_per_token_s + self.prefill_base_s <= 0:
            raise ValueError("prefill_per_token_s and prefill_base_s are both 0: a prefill "
                             "would take no time (and capacity would be infinite)")
        return self


class ClusterCfg(_Strict):
    """The fat-tree (defaults are FatTreeSpec's, the paper's 64-GPU cluster) plus serving limits."""

    pods: int = Field(FatTreeSpec.pods, ge=1, le=4096)
    racks_per_pod: int = Field(FatTreeSpec.racks_per_pod, ge=1, le=1024)
    servers_per_rack: int = Field(FatTreeSpec.servers_per_rack, ge=1, le=1024)
    gpus_per_server: int = Field(FatTreeSpec.gpus_per_server, ge=1, le=64)
    tp: int = Field(FatTreeSpec.tp, ge=1, le=64)
    host_gbps: float = Field(FatTreeSpec.host_gbps, gt=0, le=1e6)
    nvlink_gbps: float = Field(FatTreeSpec.nvlink_gbps, gt=0, le=1e7)
    tor_oversubscription: float = Field(FatTreeSpec.tor_oversubscription, ge=1, le=1024)
    core_oversubscription: float = Field(FatTreeSpec.core_oversubscription, ge=1, le=1024)
    latency_us: tuple[Latency, Latency, Latency, Latency] = FatTreeSpec.latency_us
    aggs_per_pod: int | None = Field(None, ge=1, le=1024,
                                     description="default realises the ratio")
    cores_per_agg: int | None = Field(None, ge=1, le=1024,
                                      description="default realises the ratio")
    placement: Literal["segregated", "colocated"] = "segregated"
    prefill_instances: int | None = Field(None, ge=1)
    prefill: tuple[str, ...] = ()
    beta_max: int = Field(64, ge=1, le=100000)
    memory_gb: float = Field(180.0, gt=0, le=1e6,
                             description="KV memory per instance (4 x 45 GB)")
    memory_reserve_gb: float = Field(2.0, ge=0, le=1e6, description="m_min")
    slowdown: dict[str, float] = Field(
        {}, description="instance -> compute time multiplier of its prefills (a slower or "
        "shared GPU: computational imbalance)")

    @model_validator(mode="before")
    @classmethod
    def _fits_a_machine(cls, data):
        """Refuse a fabric too large to build before building it."""
        if isinstance(data, dict):
            dims = [data.get(k, getattr(FatTreeSpec, k)) for k in
                    ("pods", "racks_per_pod", "servers_per_rack", "gpus_per_server")]
            if all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
                gpus = dims[0] * dims[1] * dims[2] * dims[3]
                if gpus > MAX_GPUS:
                    need = gpus * 125_000 // 10**9  # integers: the product may be huge
                    raise ValueError(
                        "pods x racks_per_pod x servers_per_rack x gpus_per_server = "
                        + (f"{gpus:,} GPUs" if gpus < 10**12 else "over 10^12 GPUs")
                        + f", more than {MAX_GPUS:,}: the flow model holds about 125 MB per "
                        "1,000 GPUs per simulated minute (measured at 8,192), so this would "
                        "need " + (f"~{need:,} GB" if need < 10**6 else "more memory than "
                                   "any machine has"))
        return data

    @model_validator(mode="after")
    def _spec_builds(self) -> ClusterCfg:
        spec = self.spec()  # raises ValueError with the offending field named
        names = {i.name for i in spec.instances}
        for name, factor in self.slowdown.items():
            if name not in names:
                raise ValueError(f"slowdown names unknown instance {name!r}")
            if not 0.1 <= factor <= 100:
                raise ValueError(f"slowdown of {name}: {factor} (0.1-100)")
        return self

    def spec(self) -> FatTreeSpec:
        fields = self.model_dump(exclude={"beta_max", "memory_gb", "memory_reserve_gb",
                                          "slowdown"})
        return FatTreeSpec(**fields)


class TraceSynthCfg(_Strict):
    mean_input: int = Field(16000, gt=0, le=10_000_000)
    sigma_input: float = Field(0.8, ge=0, le=10)
    mean_output: int = Field(150, gt=0, le=1_000_000)
    documents: int = Field(64, ge=1, le=1_000_000)
    zipf_s: float = Field(1.1, gt=0, le=100)
    share_fraction: float = Field(0.6, ge=0, le=1)


class WorkloadCfg(_Strict):
    trace: str | None = "data/traces/mooncake_synthetic_trace.jsonl"
    synthetic: TraceSynthCfg | None = None
    profile: Literal["chatbot", "rag", "long-context", "all"] = "rag"
    load: float | None = Field(1.0, gt=0, le=100,
                               description="fraction of prefill-pool capacity")
    rate_rps: float | None = Field(None, gt=0, le=1e6,
                                   description="absolute rate; overrides load")
    warmup_s: float = Field(5.0, ge=0, le=DAY_S)
    measure_s: float = Field(15.0, gt=0, le=DAY_S)
    trace_offset_s: float = Field(
        60.0, ge=0, le=1e8,
        description="trace second where the run starts (the paper measures 60-75 s)"
    )
    seed_segments: bool = Field(
        False,
        description="each seed replays its own segment of the trace (seed k of a run starting "
        "at seed s starts (k - s) windows after trace_offset_s), so seeds are independent "
        "samples of the trace; without it seeds share the trace's arrivals and lengths "
        "and differ only in prefix sharing. Synthetic workloads ignore it (their seeds "
        "are independent already)",
    )
    trace_loop: bool = Field(
        False,
        description="when a run needs more trace than exists, replay it again with shifted "
        "hash ids (sharing within a replay is kept, across replays lost)",
    )
    prewarm: bool = Field(
        True,
        description="fill decode caches with the prefixes of trace requests before the offset, "
        "each on a seeded-random decode instance, the same for every scheduler",
    )
    input_length: int | None = Field(None, gt=0, le=10_000_000,
                                     description="fixed input length override")
    p_share: float | None = Field(None, ge=0, le=1, description="override the profile's")
    slo_s: float | None = Field(None, gt=0, le=DAY_S,
                                description="override the profile's TTFT SLO")
    slo_mix: list[tuple[float, float]] | None = Field(
        None, description="[[share, slo_s], ...]: each request draws its TTFT SLO (seeded by "
        "its id, the same in both engines); shares sum to 1")
    block_tokens: int = Field(16, description="prefix-match block size; divides 512")

    @field_validator("block_tokens")
    @classmethod
    def _divides(cls, v: int) -> int:
        if v <= 0 or 512 % v:
            raise ValueError("must be a positive divisor of 512 (Mooncake's block size)")
        return v

    @field_validator("slo_mix")
    @classmethod
    def _mix(cls, v):
        if v is None:
            return v
        if not v or any(share <= 0 or slo <= 0 for share, slo in v):
            raise ValueError("give [[share, slo_s], ...] with positive shares and SLOs")
        if abs(sum(share for share, _ in v) - 1.0) > 1e-6:
            raise ValueError(f"shares sum to {sum(share for share, _ in v):g}, not 1")
        return v

    @model_validator(mode="after")
    def _source(self) -> WorkloadCfg:
        if self.synthetic is None and self.trace is None:
            raise ValueError("give a trace path or a synthetic section")
        if self.load is None and self.rate_rps is None:
            raise ValueError("give load (fraction of capacity) or rate_rps")
        return self


class BackgroundCfg(_Strict):
    tier1: float = Field(0.0, ge=0, lt=1)
    tier2: float = Field(0.0, ge=0, lt=1)
    tier3: float = Field(0.0, ge=0, lt=1)
    jitter: float = Field(0.0, ge=0, le=1, description="per-link relative variation")
    change_s: float = Field(1.0, ge=MIN_PERIOD_S, le=DAY_S,
                            description="how often per-link background changes")

    def fraction(self, tier: int) -> float:
        return {0: 0.0, 1: self.tier1, 2: self.tier2, 3: self.tier3}[tier]


class TcpCfg(_Strict):
    """The flow model's TCP terms (network.flow_model: tcp; testbed/model/tcp.py)."""

    replica: bool = Field(
        False, description="use the emulated replica's equivalents (segment of 1514 wire "
        "bytes / emulation.scale, wall delays / emulation.time_dilation) to predict the "
        "packets; false: the modelled cluster's own segment and delays")
    mss_bytes: float = Field(4096, gt=0, le=1e12, description="modelled bytes per segment "
                             "(the cluster's; RoCE's 4096 by default)")
    init_cwnd: float = Field(10, gt=0, le=1e6, description="segments in the first window")
    handshake_rtts: float = Field(1.0, ge=0, le=100, description="round trips before data")
    tail_rtts: float = Field(1.0, ge=0, le=100,
                             description="round trips from the last byte to the sender's end")
    hop_delay_us: float = Field(0.0, ge=0, le=1e6, description="per hop and direction: "
                                "switch processing (replica: wall microseconds)")
    serialisation: float = Field(1.0, ge=0, le=1, description="share of a segment's "
                                 "store-and-forward time each hop adds to the RTT (a shaper's "
                                 "burst hides some: testbed calibrate fits it for the replica)")
    rtt_exponent: float = Field(0.0, ge=0, le=2, description="bandwidth share ~ rtt^-x "
                                "between flows of different path lengths (0: equal)")
    shard_spread: float = Field(0.0, ge=0, le=0.9, description="unequal shares among a "
                                "transfer's parallel shard streams: the first gets 1+x of an "
                                "equal share, the last 1-x (a transfer ends with its slowest "
                                "shard; testbed calibrate fits it for the replica)")
    contention_idle: float = Field(0.0, ge=0, le=0.9, description="share of its bottleneck's "
                                   "time a stream loses while it competes with others (TCP's "
                                   "losses and timeouts; its end moves by x / (1 - x) of the "
                                   "time it lost to competitors; testbed calibrate fits it "
                                   "for the replica from its competing probes)")


class NetworkCfg(_Strict):
    background: BackgroundCfg = BackgroundCfg()
    flow_model: Literal["fluid", "tcp"] = Field(
        "fluid", description="fluid: max-min rates from the first to the last byte; tcp: "
        "adds handshake, slow start and tail round trips and RTT-weighted shares "
        "(network.tcp)")
    tcp: TcpCfg = TcpCfg()
    flows_per_transfer: int | None = Field(None, ge=1, le=64, description="default: TP")
    ecmp: Literal["per-transfer", "per-pair", "per-flow"] = Field(
        "per-transfer",
        description="per-transfer: a transfer's flows share one path, drawn at random per "
        "transfer (the paper's per-pair tier bandwidth); per-pair: the path is a stable hash "
        "of the (src, dst) addresses, as switches do (the emulated fabric runs per-transfer "
        "this way); per-flow: each flow hashes alone (5-tuple)",
    )


    flow_policy: Literal["fair", "mfs", "sjf", "edf", "karuna"] = Field(
        "fair", description="priority of KV flows: fair sharing, or levels by MFS "
        "(Defer-and-Promote), SJF, EDF or Karuna (testbed/model/mfs.py)")
    priority_levels: int = Field(8, ge=2, le=8, description="K strict-priority levels")
    mfs_theta_top: float = Field(0.8, gt=0, le=100, description="MLU that earns the top level")
    mfs_theta_ratio: float = Field(0.5, gt=0, lt=1, description="geometric threshold ratio")
    mfs_pruning: Literal["feasibility", "alone", "none"] = Field(
        "feasibility", description="MFS's pruning to the scavenger class: the paper's "
        "feasibility check per sender, only what cannot make it even alone, or none")
    reprioritize_s: float = Field(
        0.05, ge=MIN_PERIOD_S, le=DAY_S,
        description="how often levels are re-evaluated (a layer boundary)")
    transfer_mode: Literal["contiguous", "segment", "block"] = Field(
        "contiguous", description="KV send calls per shard: one (contiguous), one per segment "
        "of segment_blocks blocks, or one per block per layer per K/V (PagedAttention's "
        "layer-wise layout); testbed/model/granularity.py")
    segment_blocks: int = Field(16, ge=1, le=1_000_000,
                                description="blocks per call in segment mode")
    per_call_s: float = Field(
        0.0, ge=0, le=60, description="flow model: time each send call after the first adds to a "
        "transfer (measure it: benchmarks/bench_granularity.py)")
    capacity_factor: dict[int, float] = Field(
        {}, description="flow model only: link tier -> fraction of the configured rate the "
        "packets achieve (written by `testbed calibrate`); 1.0 where absent")

    @field_validator("capacity_factor")
    @classmethod
    def _factors(cls, v: dict[int, float]) -> dict[int, float]:
        for tier, f in v.items():
            if tier not in (0, 1, 2, 3) or not 0.1 <= f <= 1.5:
                raise ValueError(f"tier {tier}: factor {f} (tiers 0-3, factors 0.1-1.5)")
        return v


class OracleCfg(_Strict):
    refresh_s: float = Field(1.0, ge=MIN_PERIOD_S, le=DAY_S)
    inflight_cap: int = Field(16, ge=1, le=1_000_000)


class EmulationCfg(_Strict):
    """Packet-level emulation: a scaled replica of the modelled fabric."""

    scale: float = Field(
        2e-4, gt=0, le=1,
        description="multiplies every bandwidth and KV byte count (100 Gbps -> 20 Mbit/s)",
    )
    time_dilation: float = Field(1.0, ge=1, le=1000,
                                 description="slows bandwidth down when CPU-bound")

    @property
    def dilation(self) -> Dilation:
        """Wall <-> modelled spans and rates at this time dilation."""
        return Dilation(self.time_dilation)
    datapath: Literal["auto", "kernel", "user"] = "auto"
    start_timeout_s: float = Field(
        120.0, ge=5, le=3600, description="wall seconds every worker has to start and "
        "connect to the router before the run fails: raise it for slow or software-emulated "
        "servers (a cluster run starts each remote worker over SSH)")
    ovs_instances: int = Field(
        1, ge=1, le=64, description="Open vSwitch daemons the userspace datapath is split "
        "over, each in its own network namespace, switches shared out round-robin per "
        "layer: the userspace datapath forwards every port in one thread, so one daemon "
        "is one core. 1 (the system's OVS) is right on 2 cores; about cores/4 on a server "
        "(README, Fidelity)")
    private_ovs: bool = Field(
        False, description="carry the switches on the run's own OVS daemon(s) in their own "
        "namespaces even with ovs_instances 1, not the system's Open vSwitch (userspace "
        "datapath); fabrics run side by side (--fabrics) set it for you")
    bind: str = Field("127.0.0.1", description="controller, oracle and metrics address: "
                      "loopback unless switches or schedulers on other machines need them")
    token: str | None = Field(
        None, min_length=16, max_length=256, pattern=r"^[\x21-\x7e]+$",
        description="bearer token POST /intent requires (Authorization: Bearer ...); "
        "required when bind is not loopback. It is saved with the run's scenario.yaml")
    of_port: int = Field(6653, ge=1, le=65535)
    oracle_port: int = Field(8000, ge=1, le=65535)
    metrics_port: int = Field(9464, ge=1, le=65535, description="not 9100: node exporter")
    poll_s: float = Field(1.0, ge=0.05, le=3600,
                          description="telemetry poll and oracle refresh period")
    kv_port: int = Field(7000, ge=1, le=65535, description="TCP port marked as the KV class")
    queue_min_packets: int = Field(
        16, ge=4, le=10000, description="leaf queue depth floor in packets (queues are 50 ms "
        "at the link rate, at least this): packets do not scale with the scale factor")
    layer_chunks: bool = Field(
        False, description="send KV layer by layer with a DSCP priority level per layer "
        "chunk (HTB level classes on every egress); always on under a non-fair "
        "network.flow_policy; set it for fair runs compared against those")
    queue_limit: Literal["packets", "bytes"] = Field(
        "packets", description="leaf queues hold queue_min_packets packets of any size, or "
        "that many full frames' worth of bytes (a switch's buffer: SYNs and ACKs fit behind "
        "data; fewer SYN losses on the probes but more unfaithful loaded runs here: README)")
    rto_min_ms: float | None = Field(
        None, gt=0, le=1000, description="minimum TCP retransmission timeout on the replica's "
        "hosts, in modelled ms (wall: x time_dilation), set on every host route (null: the "
        "kernel's 200 ms wall, 100+ modelled ms of silence after a tail loss)")
    capture: list[str] = Field(
        [], max_length=64, description="links whose packets every run records: 'a>b' (what "
        "a sends toward b) or 'a-b' (both ways); a pcap per direction per run under the "
        "run's capture/ (Wireshark reads it) and capture/flows.csv (emulate --capture)")
    capture_snaplen: int = Field(
        128, ge=64, le=65535, description="bytes kept of each captured packet: the headers "
        "by default (65535 keeps the KV payload too, a file the size of the traffic)")
    tcp_congestion: Literal["cubic", "reno", "bbr", "system"] = Field(
        "cubic", description="congestion control of KV streams; loss-based cubic shares a "
        "bottleneck the way the flow model's max-min fairness assumes (system: the host's "
        "default, bbr on many kernels)")


    @field_validator("bind")
    @classmethod
    def _an_address(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"{v!r} is not an IP address") from None
        return v

    @model_validator(mode="after")
    def _exposed_needs_token(self) -> EmulationCfg:
        if not ipaddress.ip_address(self.bind).is_loopback and self.token is None:
            raise ValueError(f"bind {self.bind} is not loopback: the intent endpoint and "
                             "OpenFlow would be open to that network, so set emulation.token "
                             "(16+ characters) for POST /intent, and firewall of_port")
        return self


class RecoveryCfg(_Strict):
    """KVRS recovery when a decode instance fails (testbed/model/recovery.py)."""

    policy: Literal["always_migrate", "always_recompute", "adaptive"] = "adaptive"
    migration_slots: int = Field(32, ge=1, le=100000,
                                 description="concurrent migrations at most")
    heartbeat_s: float = Field(0.5, ge=0.01, le=3600, description="decode heartbeat interval")
    missed_heartbeats: int = Field(3, ge=1, le=1000,
                                   description="missed beats that declare a death")
    prefill_table: list[tuple[int, float]] | None = Field(
        None, description="[[tokens, seconds], ...] for recompute; default: timing model")
    oracle_max_age_s: float = Field(
        5.0, gt=0, le=DAY_S, description="older oracle: fall back to the static tier map")
    recompute_target: Literal["scheduler", "local"] = Field(
        "scheduler", description="where a recompute runs: the scheduler's pick (as a "
        "migration), or the least-loaded healthy instance nearest the failed one (KVRS's "
        "intra-node recompute)")


class FlowKVCfg(_Strict):
    """FlowKV's Load-Aware Scheduler (scheduler key `flowkv`, testbed/model/flowkv.py).
    The paper publishes no constants: ours, tuned on a disjoint trace window by
    scenarios/tune-flowkv.yaml."""

    cycle_s: float = Field(0.5, ge=MIN_PERIOD_S, le=DAY_S,
                           description="controller cycle: sample, score, decide")
    window_s: float = Field(2.0, gt=0, le=DAY_S,
                            description="sliding window that smooths the samples")
    switch_cycles: int = Field(4, ge=1, le=1_000_000,
                               description="cycles a switched node keeps its role")
    prefill_low: float = Field(0.05, ge=0, le=1, description="tuned (tune-flowkv.yaml)")
    prefill_high: float = Field(0.9, ge=0, le=1)
    decode_low: float = Field(0.5, ge=0, le=1)
    decode_high: float = Field(0.9, ge=0, le=1)
    idle: float = Field(0.15, ge=0, le=1, description="a node under this may switch role "
                        "(0.02-0.15 tuned alike)")
    max_switch: int | None = Field(None, ge=1, le=1_000_000,
                                   description="nodes switched per cycle at most")
    token_budget: int = Field(32768, ge=1, le=10**9,
                              description="queued prefill tokens that fill a node")

    @model_validator(mode="after")
    def _ordered(self) -> FlowKVCfg:
        if self.prefill_low > self.prefill_high or self.decode_low > self.decode_high:
            raise ValueError("each low threshold must not exceed its high threshold")
        return self

    def thresholds(self):
        from testbed.model.flowkv import Thresholds

        return Thresholds(self.prefill_low, self.prefill_high, self.decode_low,
                          self.decode_high, self.idle)

    def controller(self, prefill, decode):
        from testbed.model.flowkv import Controller

        return Controller(prefill, decode, self.window_s, self.switch_cycles,
                          self.thresholds(), self.max_switch)


class ReuseCfg(_Strict):
    """KV-reuse retrieval (MFS's stage 1, testbed/model/reuse.py): a prefill fetches the
    longest cached prefix of its prompt from the decode instance holding it, layer by
    layer while it computes, instead of recomputing it."""

    enabled: bool = False
    min_tokens: int = Field(512, ge=1, le=10_000_000,
                            description="shorter reusable prefixes are computed")


class FaultCfg(_Strict):
    """One injected fault: what, when (modelled seconds), where, and for how long."""

    at_s: float = Field(ge=0, le=1e7)
    kind: Literal["decode_down", "link_down", "tor_down", "controller_down", "background"]
    target: str | None = Field(None, description="instance, link 'a-b' or ToR name")
    duration_s: float | None = Field(None, gt=0, le=1e7,
                                     description="back after this (not decode)")
    tier: int | None = Field(None, ge=1, le=3, description="background: which tier")
    fraction: float | None = Field(None, ge=0, lt=1, description="background: offered load")

    @model_validator(mode="after")
    def _fields_for_kind(self) -> FaultCfg:
        needs = {"decode_down": ("target",), "link_down": ("target",),
                 "tor_down": ("target",), "controller_down": (),
                 "background": ("tier", "fraction")}[self.kind]
        missing = [f for f in needs if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.kind} fault needs {', '.join(missing)}")
        if self.kind == "decode_down" and self.duration_s is not None:
            raise ValueError("a dead decode instance does not come back (no duration_s)")
        return self


class Scenario(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=100,
                      description="names the run folders (with a stamp: within a file name)")
    description: str = Field("", max_length=10000)
    seed: int = Field(1, ge=0, le=2**32 - 1)
    seeds: int = Field(1, ge=1, le=1000, description="repetitions with seeds seed, seed+1, ...")
    schedulers: list[str] = Field(["rr", "cla", "netkv-full"], max_length=64, description=(
        "built-in keys, installed plugins' entry-point names, or 'module:Class'"))
    scheduler_timeout_ms: float = Field(100.0, gt=0, le=60_000, description=(
        "a plugin scheduler's decision past this is thrown away and the request placed by "
        "LA (reported); a decision that never returns is interrupted"))
    cla_weights: tuple[float, float] | None = None
    model: str | CustomModel = "llama-3-70b"
    timing: TimingCfg = TimingCfg()
    cluster: ClusterCfg = ClusterCfg()
    workload: WorkloadCfg = WorkloadCfg()
    network: NetworkCfg = NetworkCfg()
    oracle: OracleCfg = OracleCfg()
    emulation: EmulationCfg = EmulationCfg()
    recovery: RecoveryCfg = RecoveryCfg()
    reuse: ReuseCfg = ReuseCfg()
    flowkv: FlowKVCfg = FlowKVCfg()
    faults: list[FaultCfg] = []
    drain_s: float = Field(300.0, gt=0, le=DAY_S, description="max time after the last arrival")
    sweep: dict[str, list[Any]] = {}

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
        if emu.ovs_instances > 1:
            if emu.datapath == "kernel":
                raise ValueError("emulation.ovs_instances splits the userspace datapath; the "
                                 "kernel datapath forwards on every core already (use 1)")
            switches = sum(len(v) for v in self.cluster.spec().switches.values())
            if emu.ovs_instances > switches:
                raise ValueError(f"emulation.ovs_instances {emu.ovs_instances} exceeds the "
                                 f"fabric's {switches} switches")
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
            base = emulation_equivalent(self.emulation.scale, self.emulation.time_dilation,
                                        t.hop_delay_us * 1e-6, t.init_cwnd, t.serialisation)
            return replace(base, handshake_rtts=t.handshake_rtts, tail_rtts=t.tail_rtts,
                           shard_spread=t.shard_spread, contention_idle=t.contention_idle)
        return TcpParams(t.mss_bytes, t.init_cwnd, t.handshake_rtts, t.tail_rtts,
                         t.hop_delay_us * 1e-6, t.serialisation, t.shard_spread,
                         t.contention_idle)

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

    def cells(self) -> list[tuple[dict[str, Any], Scenario]]:
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


def _format_errors(source: str, exc: ValidationError, prefix: str = "") -> str:
    lines = [f"{source}: invalid scenario"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        lines.append(f"  {prefix}{loc or '(top level)'}: {err['msg']}")
    return "\n".join(lines)


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Load, validate (including every sweep cell) and resolve paths against the file."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: scenario file not found")
    try:
        raw = yamlfile.load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {exc.start}: "
                            f"{exc.object[exc.start:exc.start + 1]!r})") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level")
    raw = copy.deepcopy(raw)
    raw.setdefault("name", path.stem)
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(str(path), exc)) from None
    try:
        if overrides:
            scenario = scenario.with_overrides(overrides)
    except ValidationError as exc:
        raise ScenarioError(_format_errors(f"{path} (with --set)", exc)) from None
    trace = scenario.workload.trace
    if trace is not None and scenario.workload.synthetic is None:
        resolved = resolve_path(trace, path.parent)
        if not resolved.is_file():
            raise ScenarioError(f"{path}: workload.trace: file not found: {trace}")
        scenario = scenario.with_overrides({"workload.trace": str(resolved)})
    for point, _ in _validated_cells(scenario, path):
        del point
    return scenario


def _validated_cells(scenario: Scenario, path: Path):
    try:
        return scenario.cells()
    except ValidationError as exc:
        raise ScenarioError(_format_errors(str(path), exc, prefix="sweep cell: ")) from None


def resolve_path(value: str, base: Path) -> Path:
    """A relative path means: next to the scenario file, else the project root, else CWD."""
    p = Path(value)
    if p.is_absolute():
        return p
    for root in (base, Path(__file__).resolve().parent.parent, Path.cwd()):
        if (root / p).exists():
            return (root / p).resolve()
    return (base / p).resolve()
