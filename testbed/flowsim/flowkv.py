"""FlowKV-LA in the flow simulator: the global controller's cycle and hybrid nodes.

Every flowkv.cycle_s the controller samples each node's state (testbed.model.flowkv
.NodeState), smooths it over the sliding window, scores both pools and plans: in the
imbalanced and extreme regimes idle decode nodes switch to prefill work for
switch_cycles cycles (or until load is normal again). A switched decode node gets its
own prefill queue on the same GPU: prefill work holds its decode iterations back
(DecodeInstance.hold), and a request it prefills is decoded there when it has the
memory (no network transfer), elsewhere otherwise. Prefill nodes switching to decode
work (the other direction) are planned by the model but not executed: they would need a
decode engine on every prefill node.
"""

from __future__ import annotations

from collections import Counter

from testbed.flowsim.serving import PrefillInstance
from testbed.model import flowkv


class FlowKVControl:
    def __init__(self, sim):
        self.sim = sim
        self.cfg = sim.scenario.flowkv
        self.windows = {name: flowkv.SlidingWindow(self.cfg.window_s)
                        for name in (*sim.prefill, *sim.decode)}
        self.switches = flowkv.RoleSwitches(self.cfg.switch_cycles)
        self.hybrid: dict[str, PrefillInstance] = {}  # decode node -> its prefill queue
        self.accepting: set[str] = set()  # switched decode nodes taking prefill work
        self.regimes: Counter[str] = Counter()
        self.scale_hints: list[tuple[float, str]] = []

    def start(self) -> None:
        self.sim.loop.after(self.cfg.cycle_s, self.cycle)

    # -- where requests go --------------------------------------------------------------
    def prefill_targets(self) -> list[PrefillInstance]:
        return [*self.sim.prefill.values(), *(self.hybrid[n] for n in sorted(self.accepting))]

    def choose_prefill(self, tokens: int, now: float) -> PrefillInstance:
        """Normal regime: the node with the smallest expected TTFT (queue + its compute)."""
        return min(self.prefill_targets(),
                   key=lambda p: (p.expected_end(tokens, now), p.name))

    # -- the cycle ------------------------------------------------------------------------
    def _sending(self) -> Counter[str]:
        return Counter(rs.prefill for rs in self.sim.states
                       if rs.transfer_start is not None and rs.transfer_end is None
                       and rs.state is None)

    def _prefill_state(self, p: PrefillInstance, sending: int) -> flowkv.NodeState:
        return flowkv.prefill_node_state(p.busy is not None, len(p.queue), sending,
                                         sum(j.rs.req.input_len for j in p.queue),
                                         self.cfg.token_budget)

    def _decode_state(self, d) -> flowkv.NodeState:
        return flowkv.decode_node_state(d.batch_size, d.beta_max, d.queued, d.free_memory,
                                        d.capacity)

    def cycle(self) -> None:
        sim, now = self.sim, self.sim.loop.now
        sending = self._sending()
        for name, p in sim.prefill.items():
            self.windows[name].add(now, self._prefill_state(p, sending[name]))
        live = [n for n in sim.decode if n not in sim.failed]
        for name in live:
            self.windows[name].add(now, self._decode_state(sim.decode[name]))
        p_scores = {n: flowkv.load_score(self.windows[n].mean(), "prefill") for n in sim.prefill}
        d_scores = {n: flowkv.load_score(self.windows[n].mean(), "decode") for n in live}
        plan = flowkv.plan_cycle(p_scores, d_scores, self.cfg.thresholds(), self.cfg.max_switch)
        self.regimes[plan.regime] += 1
        if plan.scale_hint:
            self.scale_hints.append((now, plan.scale_hint))
        new, back = self.switches.apply(plan, live)
        for name in new:
            if name not in self.hybrid:
                dec = sim.decode[name]
                self.hybrid[name] = PrefillInstance(
                    name, sim.timing, sim.model.n_layers, sim.loop, sim._prefill_done,
                    sim.scenario.cluster.slowdown.get(name, 1.0), on_busy=dec.hold)
            self.accepting.add(name)
        self.accepting -= set(back)
        self.accepting &= set(live)
        sim.loop.after(self.cfg.cycle_s, self.cycle)

    def counters(self) -> dict:
        return {"flowkv_regimes": dict(self.regimes),
                "role_switches": sum(1 for _, e in self.switches.log if e == "switch"),
                "scale_hints": len(self.scale_hints)}
