"""Recovery of requests whose decode instance failed, in the flow simulator (KVRS).

Detection comes `missed_heartbeats x heartbeat_s` after the death; until then the
router may still send work there. On detection every request the dead instance held,
was receiving, or was about to receive is recovered: the scheduler picks a healthy
target as usual, testbed/model/recovery.py prices both paths (migrate: the full KV from
the prefill instance at the oracle's live bandwidth, or the EWMA of recent migrations
when the oracle is stale; recompute: T_prefill(L) from the profiled table behind the
target's own recompute queue; both plus the target's queueing), and the policy
chooses, migrates only while a migration slot is free, or aborts with the reason.
A request that had produced its first token keeps its TTFT and restarts decoding.
"""

from __future__ import annotations

from testbed.lifecycle import RequestState
from testbed.model.kv import kv_cache_bytes
from testbed.model.recovery import (
    ABORT,
    MIGRATE,
    RecoveryBook,
    nearest_instance,
    plan_recovery,
    recovery_bandwidth_bps,
    ttft_budget,
)
from testbed.model.schedulers import RequestInfo


class RecoveryManager(RecoveryBook):
    def __init__(self, sim):
        self.sim = sim
        super().__init__(sim.scenario.recovery, sim.timing)

    def detection_delay(self) -> float:
        return self.cfg.missed_heartbeats * self.cfg.heartbeat_s

    def recover(self, rs: RequestState) -> None:
        sim = self.sim
        now = sim.loop.now
        req = rs.req
        oracle = sim.oracle_view()
        cands = sim.candidates(req)
        decision = sim.scheduler.select(RequestInfo(req.request_id, req.input_len, rs.kv_bytes),
                                        rs.prefill, cands, oracle)
        if decision.rejected:
            self._abort(rs, f"decode {rs.decode} failed; {decision.reason}")
            return
        by_name = {c.instance: c for c in cands}
        load = lambda n: sim.scheduler.load_time(by_name[n])  # noqa: E731
        mig_target = decision.decode
        rec_target = (nearest_instance(sim.spec, rs.decode, list(by_name), load)
                      if self.cfg.recompute_target == "local" else mig_target)
        budget = ttft_budget(sim.workload.slo_for(req.request_id), now, req.arrival_s,
                             rs.first_token)
        plan = plan_recovery(
            self.cfg.policy, rs.kv_bytes, req.input_len,
            recovery_bandwidth_bps(oracle, rs.prefill, mig_target, sim.oracle_fresh(), self.ewma,
                                   sim.scheduler.inflight.get(decision.tier, rs.prefill)),
            load(mig_target), load(rec_target), max(0.0, self.backlog.get(rec_target, 0.0) - now),
            self.table, budget, self.slots)
        self.slot_fallbacks += plan.slot_fallback
        action = plan.action
        if action == ABORT:
            sim.scheduler.transfer_done(rs.prefill, decision.tier)
            self._abort(rs, f"decode {rs.decode} failed; {plan.reason}")
            return
        target = mig_target if action == MIGRATE else rec_target
        self.decisions[action] += 1
        rs.recovery = action
        rs.decode, rs.tier = target, sim.oracle.tier(rs.prefill, target)
        rs.hit_tokens, rs.transfer_start, rs.transfer_end = 0, now, None
        rs.eff_bytes = rs.kv_bytes if action == MIGRATE else 0.0
        sim.decode[target].assign(rs, 0, kv_cache_bytes(sim.model, req.output_len))
        if action == MIGRATE:
            sim.start_transfer(rs)  # the scheduler's in-flight count covers it until done
            return
        sim.scheduler.transfer_done(rs.prefill, decision.tier)  # no network transfer
        start = max(now, self.backlog.get(target, 0.0))
        end = start + plan.recompute_s
        self.backlog[target] = end
        sim.loop.at(end, lambda: sim.kv_ready(rs))

    def migrated(self, rs: RequestState, now: float) -> None:
        """A migration's KV landed: free its slot, learn its rate."""
        self.slots.release()
        self.ewma.observe(rs.eff_bytes, now - rs.transfer_start)

    def _abort(self, rs: RequestState, reason: str) -> None:
        self.decisions[ABORT] += 1
        rs.recovery = ABORT
        rs.terminate("aborted", reason)
        self.sim.request_ended()
