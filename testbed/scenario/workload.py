"""Where the requests come from: a trace (and how it is compressed, shared and
sliced) or a synthetic generator."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from testbed.scenario.base import DAY_S, _Strict


class TraceSynthCfg(_Strict):
    mean_input: int = Field(16000, gt=0, le=10_000_000, description="mean input tokens")
    sigma_input: float = Field(0.8, ge=0, le=10, description=(
        "lognormal sigma of the input length"))
    mean_output: int = Field(150, gt=0, le=1_000_000, description="mean output tokens")
    documents: int = Field(64, ge=1, le=1_000_000, description=(
        "documents in the shared-prefix pool"))
    zipf_s: float = Field(1.1, gt=0, le=100, description=(
        "Zipf exponent of the documents' popularity"))
    share_fraction: float = Field(0.6, ge=0, le=1, description=(
        "share of a document's blocks a request that draws it reuses"))


class WorkloadCfg(_Strict):
    trace: str | None = Field("data/traces/mooncake_synthetic_trace.jsonl", description=(
        "a Mooncake JSONL trace; null with `synthetic`"))
    synthetic: TraceSynthCfg | None = Field(None, description=(
        "generate the requests instead of reading a trace"))
    profile: Literal["chatbot", "rag", "long-context", "all"] = Field("rag", description=(
        "which of the trace's request classes to replay (the paper's workloads)"))
    load: float | None = Field(1.0, gt=0, le=100,
                               description="fraction of prefill-pool capacity")
    rate_rps: float | None = Field(None, gt=0, le=1e6,
                                   description="absolute rate; overrides load")
    warmup_s: float = Field(5.0, ge=0, le=DAY_S, description=(
        "modelled seconds of arrivals before the measurement (served, not judged)"))
    measure_s: float = Field(15.0, gt=0, le=DAY_S, description=(
        "modelled seconds of arrivals that are measured"))
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
    segments: int | None = Field(
        None, ge=1, le=1_000_000,
        description="how many workloads the seeds cycle through (null: each seed its own): "
        "seed k of a run starting at seed s replays the workload of seed s + (k - s) mod "
        "segments (its requests, lengths and prefix sharing; with seed_segments, that "
        "seed's segment of the trace) with its own draws of the run's randomness (the "
        "schedulers' tie-breaks, the decode instance each prewarmed prefix lands on, "
        "per-flow ECMP). validate --packets ns3 sets it once "
        "every segment of the trace is judged and more packet runs are needed",
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
