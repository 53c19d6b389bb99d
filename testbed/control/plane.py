"""The control plane both engines run: the router's decisions over a request's life.

After a request's prefill it is decoded where it was prefilled (a node doing both roles,
FlowKV) or the scheduler picks a decode instance; the scheduler's own transfers in flight
(NetKV's n_inflight) are counted per request, so a count is released exactly once, however
the transfer ends: its KV landed, its receiver died, the request failed or was aborted.
When a decode instance is declared dead every request it held, was receiving or was about
to receive is recovered (KVRS: testbed/model/recovery.py prices migrating and recomputing,
the policy chooses, a migration holds a slot until its KV lands or its target dies too).

This is logic only: what a decision does to the world goes through an `Engine` (the flow
simulator moves fluid flows, the packet router sends worker messages), as Faucet keeps its
decision logic apart from its os-ken shell.
"""

from __future__ import annotations

import time
from typing import Protocol

from testbed.lifecycle import RequestState, served_state
from testbed.model import reuse
from testbed.model.candidates import Candidate, CandidateTable, find
from testbed.model.extensions import plugins
from testbed.model.extensions.guard import GuardedScheduler, fault_report
from testbed.model.recovery import (
    ABORT,
    MIGRATE,
    RECOMPUTE,
    RecoveryBook,
    nearest_instance,
    plan_recovery,
    recovery_bandwidth_bps,
    ttft_budget,
)
from testbed.model.schedulers import (
    RequestInfo,
    Scheduler,
    SchedulerContext,
    make_scheduler,
)
from testbed.serving import EarliestFree


class Engine(Protocol):
    """What a control-plane decision needs from, and does to, an engine."""

    def now(self) -> float: ...

    def candidates(self, request) -> list[Candidate] | CandidateTable:
        """Decode instances as the router sees them, the dead and closed left out."""

    def oracle(self):
        """The oracle a decision uses now (ControlPlane.view of the engine's latest)."""

    def oracle_fresh(self) -> bool:
        """Whether the engine's latest oracle is within recovery.oracle_max_age_s."""

    def slo(self, request_id: str) -> float: ...

    def prefix_hits(self, request) -> dict[str, int]:
        """Live decode instance -> cached prefix tokens of `request` (KV reuse)."""

    def assign_transfer(self, rs: RequestState) -> None:
        """rs.decode reserves for the request; rs.prefill sends rs.eff_bytes to it."""

    def assign_local(self, rs: RequestState) -> None:
        """rs.decode is rs.prefill: the KV is already there."""

    def assign_recompute(self, rs: RequestState, seconds: float, ready_at: float) -> None:
        """rs.decode reserves and recomputes the KV (`seconds` of prefill, done by
        `ready_at` behind its other recompute work)."""

    def ended(self, rs: RequestState) -> None:
        """The request reached a terminal state."""


def scenario_scheduler(scenario, key: str, seed: int) -> Scheduler | GuardedScheduler:
    """The scheduler `key` as a scenario configures it, the same in both engines: a
    built-in, or a plugin (model/extensions/plugins.py) behind its guard (model/extensions/guard.py)."""
    cluster = scenario.cluster
    ctx = SchedulerContext(scenario.timing_model(), cluster.beta_max,
                           cluster.memory_reserve_gb * 1e9, scenario.oracle.inflight_cap,
                           seed=seed)
    if plugins.is_builtin(key):
        return make_scheduler(key, ctx, cla_weights=scenario.cla())
    plugin = plugins.resolve(key)
    try:
        inner = plugin.build(ctx)
    except Exception as exc:  # noqa: BLE001 - the plugin's constructor, reported by name
        raise plugins.PluginError(f"scheduler {plugin.origin!r}: building it raised "
                                  f"{type(exc).__name__}: {exc}") from None
    return GuardedScheduler(key, inner, scenario.scheduler_timeout_ms / 1e3)


class ControlPlane:
    def __init__(self, scheduler: Scheduler, spec, recovery_cfg, timing, engine: Engine):
        self.scheduler = scheduler
        self.spec = spec
        self.engine = engine
        self.book = RecoveryBook(recovery_cfg, timing)
        self.dead: set[str] = set()  # decode instances declared dead
        self.decision_us: list[float] = []
        self.stale_decisions = 0
        self._counted: dict[str, tuple[int, str]] = {}  # request -> (tier, prefill) in flight
        self._slots: set[str] = set()  # requests holding a migration slot
        self._earliest = EarliestFree()  # the arriving request's prefill instance

    # -- views ----------------------------------------------------------------------------
    def view(self, oracle, age_s: float):
        """The oracle a decision may use: past oracle_max_age_s only its static tier map
        (no congestion), and such a decision is counted as stale."""
        if age_s <= self.book.cfg.oracle_max_age_s:
            return oracle
        self.stale_decisions += 1
        return oracle.with_congestion({}, oracle.generated_at)

    # -- in-flight bookkeeping ----------------------------------------------------------------
    def _count(self, rs: RequestState, tier: int) -> None:
        """The scheduler counted this transfer (select); remember it for the release."""
        self._counted[rs.req.request_id] = (tier, rs.prefill)

    def _release(self, rs: RequestState) -> None:
        """The request's transfer is no longer in flight: release its count (once) and its
        migration slot (once)."""
        counted = self._counted.pop(rs.req.request_id, None)
        if counted is not None:
            self.scheduler.transfer_done(counted[1], counted[0])
        if rs.req.request_id in self._slots:
            self._slots.discard(rs.req.request_id)
            self.book.slots.release()

    def in_flight(self) -> int:
        return len(self._counted)

    # -- the request path --------------------------------------------------------------------
    def place_prefill(self, rs: RequestState, prefill: dict, roles, reuse_cfg,
                      prefer: str | None = None):
        """An arriving request goes to the prefill instance whose queue clears first (with
        FlowKV: the node with the smallest expected TTFT, decode nodes accepting prefill
        work included), or to `prefer` (a placement recorded elsewhere, model/follow.py)
        when it is a prefill instance, and, with KV reuse, fetches its longest cached
        prefix from the live instance holding it. Returns (the instance, the reuse plan or
        None); the instance has the request queued (the engine's estimate or its real
        queue)."""
        now = self.engine.now()
        if prefer in prefill:
            inst = prefill[prefer]
        elif roles is not None:
            inst = roles.choose_prefill(rs.req.input_len, now)
        else:
            inst = self._earliest.pick(prefill)
        plan = None
        # a decode node doing prefill work has no fetch receiver: it computes it all
        if reuse_cfg.enabled and inst.name in prefill:
            plan = reuse.choose_holder(self.engine.prefix_hits(rs.req), reuse_cfg.min_tokens)
        rs.reuse_tokens = plan.tokens if plan else 0
        inst.enqueue(rs, now, rs.reuse_tokens, fetching=plan is not None)
        return inst, plan

    def _select(self, rs: RequestState, cands: list[Candidate] | CandidateTable, oracle):
        t0 = time.perf_counter()
        decision = self.scheduler.select(
            RequestInfo(rs.req.request_id, rs.req.input_len, rs.kv_bytes), rs.prefill, cands,
            oracle)
        self.decision_us.append((time.perf_counter() - t0) * 1e6)
        if decision.fault:
            rs.scheduler_fault = decision.fault
        return decision

    def prefilled(self, rs: RequestState) -> None:
        """The request's prefill is done on rs.prefill: place its decode."""
        cands = self.engine.candidates(rs.req)
        oracle = self.engine.oracle()
        if self._keep_local(rs, cands):
            return
        decision = self._select(rs, cands, oracle)
        if decision.rejected:
            self.end(rs, "rejected", decision.reason)
            return
        self._count(rs, decision.tier)
        rs.decode, rs.tier = decision.decode, decision.tier
        rs.hit_tokens, rs.eff_bytes = decision.hit_tokens, decision.effective_bytes
        rs.predicted_transfer_s = decision.predicted_transfer_s
        rs.transfer_start = self.engine.now()
        self.engine.assign_transfer(rs)

    def _keep_local(self, rs: RequestState, cands: list[Candidate] | CandidateTable) -> bool:
        """A node doing both roles keeps the request it prefilled when it has the memory:
        the KV is already in its GPU (tier 0, nothing crosses the network)."""
        here = find(cands, rs.prefill)
        info = RequestInfo(rs.req.request_id, rs.req.input_len, rs.kv_bytes)
        if here is None or not self.scheduler.feasible(info, [here]):
            return False
        rs.decode, rs.tier, rs.hit_tokens = rs.prefill, 0, here.hit_tokens
        rs.eff_bytes = self.scheduler.effective_bytes(info, here)
        rs.transfer_start = self.engine.now()
        self.engine.assign_local(rs)
        return True

    def landed(self, rs: RequestState, at: float) -> bool:
        """The request's KV is in place on rs.decode at `at`; False for a stale report
        (the request ended, or its KV had already landed)."""
        if rs.state is not None or rs.transfer_end is not None:
            return False
        rs.transfer_end = at
        migrated = rs.req.request_id in self._slots
        self._release(rs)
        if migrated:
            self.book.ewma.observe(rs.eff_bytes, at - rs.transfer_start)
        return True

    def end(self, rs: RequestState, state: str, reason: str = "") -> None:
        """The request ends (failed, rejected, aborted): whatever it held in flight is
        released."""
        self._release(rs)
        rs.terminate(state, reason)
        self.engine.ended(rs)

    def served(self, rs: RequestState) -> None:
        """Its last token is out: completed (or migrated / recomputed after a failure)."""
        self._release(rs)
        rs.terminate(served_state(rs.recovery))
        self.engine.ended(rs)

    # -- failures ---------------------------------------------------------------------------------
    def declare_dead(self, name: str, states) -> list[RequestState]:
        """The failure detector says `name` is dead: recover every open request placed
        there. Returns them."""
        self.dead.add(name)
        hit = [rs for rs in states if rs.state is None and rs.decode == name]
        for rs in hit:
            self._release(rs)
            self.recover(rs)
        return hit

    def recover(self, rs: RequestState) -> None:
        """KVRS: price migrating (the prefill sends the KV again) and recomputing (on the
        nearest live instance, or the scheduler's pick), let the policy choose, or abort."""
        engine, req, now = self.engine, rs.req, self.engine.now()
        oracle = engine.oracle()
        cands = engine.candidates(req)
        lost = rs.decode
        decision = self._select(rs, cands, oracle)
        if decision.rejected:
            self._abort(rs, f"decode {lost} failed; {decision.reason}")
            return
        self._count(rs, decision.tier)
        cfg = self.book.cfg
        by_name = {c.instance: c for c in cands}
        load = lambda n: self.scheduler.load_time(by_name[n])  # noqa: E731
        mig_target = decision.decode
        rec_target = (nearest_instance(self.spec, lost, list(by_name), load)
                      if cfg.recompute_target == "local" else mig_target)
        bandwidth = recovery_bandwidth_bps(
            oracle, rs.prefill, mig_target, engine.oracle_fresh(), self.book.ewma,
            self.scheduler.inflight.get(decision.tier, rs.prefill))
        budget = ttft_budget(engine.slo(req.request_id), now, req.arrival_s, rs.first_token)
        backlog = max(0.0, self.book.backlog.get(rec_target, 0.0) - now)
        plan = plan_recovery(cfg.policy, rs.kv_bytes, req.input_len, bandwidth,
                             load(mig_target), load(rec_target), backlog, self.book.table,
                             budget, self.book.slots)
        self.book.slot_fallbacks += plan.slot_fallback
        if plan.action == ABORT:
            self._abort(rs, f"decode {lost} failed; {plan.reason}")
            return
        self.book.decisions[plan.action] += 1
        rs.recovery = plan.action
        target = mig_target if plan.action == MIGRATE else rec_target
        rs.decode, rs.tier = target, oracle.tier(rs.prefill, target)
        rs.hit_tokens, rs.transfer_start, rs.transfer_end = 0, now, None
        if plan.action == MIGRATE:
            self._slots.add(req.request_id)  # plan_recovery took the slot
            rs.eff_bytes = rs.kv_bytes
            engine.assign_transfer(rs)
            return
        self._release(rs)  # no network transfer
        rs.eff_bytes = 0.0
        ready = max(now, self.book.backlog.get(target, 0.0)) + plan.recompute_s
        self.book.backlog[target] = ready
        engine.assign_recompute(rs, plan.recompute_s, ready)

    def _abort(self, rs: RequestState, reason: str) -> None:
        self.book.decisions[ABORT] += 1
        rs.recovery = ABORT
        self.end(rs, "aborted", reason)

    # -- records ------------------------------------------------------------------------------------
    def counters(self, faults_injected: int, level_bytes: dict, reuse_bytes: float,
                 prefill_stall_s: float, pruned_requests: int, roles=None) -> dict:
        """A run's counters for summary.json, the same keys from both engines: the control
        plane's own and what the engine measured of faults, priority levels (MFS), KV
        reuse and FlowKV's controller (`roles`, when it ran)."""
        return {
            "recovery_decisions": {k: self.book.decisions.get(k, 0)
                                   for k in (MIGRATE, RECOMPUTE, ABORT)},
            "migration_slot_fallbacks": self.book.slot_fallbacks,
            "stale_oracle_decisions": self.stale_decisions,
            "faults_injected": faults_injected,
            "level_bytes": {str(k): v for k, v in sorted(level_bytes.items())},
            "reuse_bytes": reuse_bytes,
            "prefill_stall_s": prefill_stall_s,
            "pruned_requests": pruned_requests,
            "scheduler_faults": fault_report(self.scheduler),
            **(roles.counters() if roles is not None else {}),
        }
