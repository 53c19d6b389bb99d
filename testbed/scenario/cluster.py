"""The model, its timing and the fat-tree it runs on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from testbed.model.timing import TimingModel
from testbed.scenario.base import MAX_GPUS, Latency, _Strict
from testbed.topologies.fattree import FatTreeSpec


class CustomModel(_Strict):
    name: str = Field("custom", description="names the model in the records")
    n_layers: int = Field(gt=0, description="transformer layers")
    n_kv_heads: int = Field(gt=0, description="KV heads (grouped-query attention)")
    d_head: int = Field(gt=0, description="dimension of one head")
    bytes_per_elem: int = Field(2, gt=0, description="bytes per KV element (2: fp16 or bf16)")


class TimingCfg(_Strict):
    iter_base_s: float = Field(TimingModel.iter_base_s, ge=0, le=60, description=(
        "a decode step's fixed time, seconds"))
    iter_per_seq_s: float = Field(TimingModel.iter_per_seq_s, ge=0, le=60, description=(
        "a decode step's time per sequence in its batch, seconds"))
    prefill_per_token_s: float = Field(TimingModel.prefill_per_token_s, ge=0, le=60, description=(
        "prefill time per input token, seconds"))
    prefill_base_s: float = Field(TimingModel.prefill_base_s, ge=0, le=3600, description=(
        "a prefill's fixed time, seconds"))

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

    pods: int = Field(FatTreeSpec.pods, ge=1, le=4096, description="pods of the fat-tree")
    racks_per_pod: int = Field(FatTreeSpec.racks_per_pod, ge=1, le=1024, description=(
        "racks (ToR switches) per pod"))
    servers_per_rack: int = Field(FatTreeSpec.servers_per_rack, ge=1, le=1024, description=(
        "servers per rack"))
    gpus_per_server: int = Field(FatTreeSpec.gpus_per_server, ge=1, le=64, description=(
        "GPUs per server"))
    tp: int = Field(FatTreeSpec.tp, ge=1, le=64, description=(
        "tensor-parallel degree: GPUs per instance and KV streams per transfer"))
    host_gbps: float = Field(FatTreeSpec.host_gbps, ge=1e-3, le=1e6, description=(
        "each GPU's NIC rate, Gbit/s (a Mbit/s at least: slower, a round trip's window "
        "rounds to nothing)"))
    nvlink_gbps: float = Field(FatTreeSpec.nvlink_gbps, ge=1e-3, le=1e7, description=(
        "NVLink rate inside a server (tier 0), Gbit/s"))
    tor_oversubscription: float = Field(FatTreeSpec.tor_oversubscription, ge=1, le=1024, description=(
        "a ToR's host capacity over its uplinks' capacity"))
    core_oversubscription: float = Field(FatTreeSpec.core_oversubscription, ge=1, le=1024, description=(
        "an aggregation switch's downlink capacity over its core links'"))
    latency_us: tuple[Latency, Latency, Latency, Latency] = Field(FatTreeSpec.latency_us, description=(
        "one-way latency of tiers 0-3, microseconds"))
    aggs_per_pod: int | None = Field(None, ge=1, le=1024,
                                     description="default realises the ratio")
    cores_per_agg: int | None = Field(None, ge=1, le=1024,
                                      description="default realises the ratio")
    placement: Literal["segregated", "colocated"] = Field("segregated", description=(
        "segregated: whole racks of prefill instances (tiers 0 and 1 unreached); "
        "colocated: prefill spread one per stride so tiers 0 and 1 appear"))
    prefill_instances: int | None = Field(None, ge=1, description=(
        "how many instances prefill; default: a quarter of them"))
    prefill: tuple[str, ...] = Field((), description=(
        "the prefill instances by name (overrides prefill_instances)"))
    beta_max: int = Field(64, ge=1, le=100000, description="a decode instance's batch at most")
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
