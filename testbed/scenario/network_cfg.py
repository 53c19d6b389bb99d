"""The network both engines model: background traffic, TCP terms, ECMP, DSCP levels,
and the oracle's refresh."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from testbed.model.extensions import network_models
from testbed.scenario.base import DAY_S, MIN_PERIOD_S, _Strict


class BackgroundCfg(_Strict):
    tier1: float = Field(0.0, ge=0, lt=1, description=(
        "share of tier 1's links that background traffic keeps busy"))
    tier2: float = Field(0.0, ge=0, lt=1, description=(
        "share of tier 2's links that background traffic keeps busy"))
    tier3: float = Field(0.0, ge=0, lt=1, description=(
        "share of tier 3's links that background traffic keeps busy"))
    jitter: float = Field(0.0, ge=0, le=1, description="per-link relative variation")
    change_s: float = Field(1.0, ge=MIN_PERIOD_S, le=DAY_S,
                            description="how often per-link background changes")

    def fraction(self, tier: int) -> float:
        return {0: 0.0, 1: self.tier1, 2: self.tier2, 3: self.tier3}[tier]


class TcpCfg(_Strict):
    """The flow model's TCP terms (network.flow_model: tcp; testbed/model/tcp.py)."""

    replica: bool = Field(
        False, description="use the emulated replica's equivalents (segment of "
        "emulation.frame_bytes wire bytes / emulation.scale, wall delays / "
        "emulation.time_dilation) to predict the packets; false: the modelled cluster's own "
        "segment and delays")
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
    seniority_s: float = Field(0.0, ge=0, description="head start (modelled seconds) that "
                               "doubles a stream's share of a link against a later one (a "
                               "newcomer takes its share over round trips while the stream "
                               "already sending holds its window; 0: equal shares from the "
                               "instant they meet)")
    join_stall_s: float = Field(0.0, ge=0, le=60, description="modelled seconds a stream "
                                "that joins a path other streams keep saturated sends nothing "
                                "after its handshake, unless its bytes fit in its first window "
                                "(its slow start overflows a short queue and it waits out "
                                "retransmission timeouts; testbed calibrate fits it for the "
                                "replica from its staggered probes; 0: none)")


class NetworkCfg(_Strict):
    background: BackgroundCfg = BackgroundCfg()
    flow_model: Literal["fluid", "tcp"] = Field(
        "fluid", description="fluid: max-min rates from the first to the last byte; tcp: "
        "adds handshake, slow start and tail round trips and RTT-weighted shares "
        "(network.tcp)")
    tcp: TcpCfg = TcpCfg()
    model: str = Field(
        "max-min", max_length=200, description="flow engine: what times a KV transfer. "
        "max-min: fluid sharing re-solved at every arrival and completion (with the TCP "
        "terms of flow_model: tcp); fixed-bandwidth, latency-bandwidth and their -fair "
        "variants: the simple models of serving simulators, timed once at a transfer's "
        "start; or a plugin's entry-point name or 'module:Class' "
        "(docs/schedulers.md#network-models). Packet engines ignore it")
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

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if not network_models.is_max_min(v):
            network_models.resolve(v)  # imported and checked now, not mid-run
        return v


class OracleCfg(_Strict):
    refresh_s: float = Field(1.0, ge=MIN_PERIOD_S, le=DAY_S, description=(
        "how often schedulers read the network cost oracle, modelled seconds"))
    inflight_cap: int = Field(16, ge=1, le=1_000_000, description=(
        "NetKV's count of its own transfers in flight is read at most this"))
