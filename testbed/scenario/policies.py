"""What the control plane does beyond placement: recovery from faults, FlowKV, KV
reuse, and the fault schedule itself."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from testbed.scenario.base import DAY_S, MIN_PERIOD_S, _Strict


class RecoveryCfg(_Strict):
    """KVRS recovery when a decode instance fails (testbed/model/recovery.py)."""

    policy: Literal["always_migrate", "always_recompute", "adaptive"] = Field("adaptive", description=(
        "migrate a failed decode's KV, recompute it, or choose by cost (adaptive)"))
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
    prefill_high: float = Field(0.9, ge=0, le=1, description=(
        "a prefill node's load over this is overloaded"))
    decode_low: float = Field(0.5, ge=0, le=1, description=(
        "a decode node's load under this is light"))
    decode_high: float = Field(0.9, ge=0, le=1, description=(
        "a decode node's load over this is overloaded"))
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

    enabled: bool = Field(False, description=(
        "retrieve reusable KV from the decode instance holding it"))
    min_tokens: int = Field(512, ge=1, le=10_000_000,
                            description="shorter reusable prefixes are computed")


class FaultCfg(_Strict):
    """One injected fault: what, when (modelled seconds), where, and for how long."""

    at_s: float = Field(ge=0, le=1e7, description=(
        "when the fault happens, modelled seconds from the start"))
    kind: Literal["decode_down", "link_down", "tor_down", "controller_down", "background"] = (
        Field(description="what fails: a decode instance, a link, a ToR, the controller; or "
              "a step in the background traffic"))
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
