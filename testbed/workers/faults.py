"""The router's side of faults: heartbeat bookkeeping, KVRS recovery state, and making a
scenario's link and ToR failures happen on the emulated fabric."""

from __future__ import annotations

from testbed.model.recovery import (
    RecoveryBook,
    RecoveryPlan,
    plan_recovery,
    recovery_bandwidth_bps,
    ttft_budget,
)


class FaultState(RecoveryBook):
    def __init__(self, cfg, timing):
        super().__init__(cfg, timing)
        self.last_beat: dict[str, float] = {}
        self.dead: set[str] = set()
        self.stale_decisions = 0
        self.max_age = 0.0
        self.log: list[dict] = []

    def note_oracle_age(self, age: float) -> None:
        self.max_age = max(self.max_age, age)

    def plan(self, rs, mig_target: str, rec_target: str, load, oracle, fresh: bool,
             now: float, slo_s: float, n_inflight: int = 0) -> RecoveryPlan:
        bw = recovery_bandwidth_bps(oracle, rs.prefill, mig_target, fresh, self.ewma, n_inflight)
        budget = ttft_budget(slo_s, now, rs.req.arrival_s, rs.first_token)
        plan = plan_recovery(self.cfg.policy, rs.kv_bytes, rs.req.input_len, bw,
                             load(mig_target), load(rec_target),
                             max(0.0, self.backlog.get(rec_target, 0.0) - now), self.table,
                             budget, self.slots)
        self.slot_fallbacks += plan.slot_fallback
        if plan.action == "recompute":
            self.backlog[rec_target] = (max(now, self.backlog.get(rec_target, 0.0))
                                        + plan.recompute_s)
        return plan


def fault_interfaces(fabric, fault) -> list[str]:
    """The switch-side interfaces (root namespace) of a failing link or ToR."""
    out = []
    for link in fabric.links:
        names = (f"{link.a}-{link.b}", f"{link.b}-{link.a}")
        hit = fault.target in names if fault.kind == "link_down" else \
            fault.target in (link.a, link.b)
        if hit:
            out += [fabric.intf_name(n, link.port_of(n)) for n in (link.a, link.b)
                    if n in fabric.switches]
    return out


def set_links(interfaces: list[str], up: bool) -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for name in interfaces:
            idx = ipr.link_lookup(ifname=name)
            if idx:
                ipr.link("set", index=idx[0], state="up" if up else "down")
