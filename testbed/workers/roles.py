"""FlowKV-LA at the router: the global controller's cycle over what workers report.

The same model as the flow simulator's (testbed.model.flowkv: states, scores, plans,
role switches), fed with the router's view: its prefill dispatch bookkeeping (what each
prefill node holds, what it is sending) and the decode instances' state reports. A
switched decode worker gets a `role` message, then prefill work, only while switched; a
switched prefill worker gets a `role` message, starts a decode engine (state reports,
heartbeats) and is a decode candidate while switched.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from testbed.model import flowkv
from testbed.serving import PrefillInstance


class RouterFlowKV:
    def __init__(self, router):
        self.r = router
        self.cfg = router.sc.flowkv
        self.control = self.cfg.controller(router.prefill, router.views)
        self.hybrid: dict[str, PrefillInstance] = {}  # the router's estimates for them
        self.accepting: set[str] = set()
        self.held: dict[str, dict[str, int]] = defaultdict(dict)  # node -> request -> tokens
        self.decoding: set[str] = set()  # switched prefill workers taking decode work
        names = [i.name for i in router.spec.instances]
        self.all_tiers = {(a, b): router.spec.tier(a, b) for a in names for b in names
                          if a != b}
        self.decode_pool = [i.name for i in router.spec.decode_pool]

    def start(self) -> None:
        self.r.loop.after(self.cfg.cycle_s, self.cycle)

    def choose_prefill(self, tokens: int, now: float) -> PrefillInstance:
        targets = [*self.r.prefill.values(), *(self.hybrid[n] for n in sorted(self.accepting))]
        return flowkv.fastest_prefill(targets, tokens, now)

    def dispatched(self, node: str, request: str, tokens: int) -> None:
        self.held[node][request] = tokens

    def prefilled(self, node: str, request: str) -> None:
        self.held[node].pop(request, None)

    def cycle(self) -> None:
        r, now = self.r, self.r.loop.now
        if r.finished:
            return
        sending = Counter(rs.prefill for rs in r.states.values()
                          if rs.transfer_start is not None and rs.transfer_end is None
                          and rs.state is None)
        samples = {}
        for name in r.prefill:
            held = self.held[name]
            samples[name] = flowkv.prefill_node_state(
                bool(held), max(len(held) - 1, 0), sending[name], sum(held.values()),
                self.cfg.token_budget)
        live = [n for n in self.decode_pool if n not in r.plane.dead]
        capacity = r.sc.cluster.memory_gb * 1e9
        for name in live:
            v = r.views[name]
            samples[name] = flowkv.decode_node_state(
                v.batch, r.sc.cluster.beta_max, v.queued + len(v.pending),
                v.free_memory - sum(v.pending.values()), capacity)
        new, back = self.control.step(now, samples, live, [*live, *r.prefill])
        for name in new:
            if name in r.prefill:  # prefill -> decode work: a decode candidate from now on
                if name not in r.views:
                    r.add_view(name)
                    r.faults.last_beat[name] = now  # its heartbeats start with the switch
                self.decoding.add(name)
                r._send(name, {"type": "role", "instance": name, "role": "decode"})
                continue
            if name not in self.hybrid:
                self.hybrid[name] = PrefillInstance(
                    name, r.timing, slowdown=r.sc.cluster.slowdown.get(name, 1.0))
            self.accepting.add(name)
            r._send(name, {"type": "role", "instance": name, "role": "prefill"})
        for name in back:
            if name in r.prefill:
                self.decoding.discard(name)
                r._send(name, {"type": "role", "instance": name, "role": "prefill"})
                continue
            self.accepting.discard(name)
            r._send(name, {"type": "role", "instance": name, "role": "decode"})
        r.loop.after(self.cfg.cycle_s, self.cycle)

    def closed_decoders(self) -> set[str]:
        """Prefill workers with a decode engine that take no decode work now."""
        return {n for n in self.r.prefill if n in self.r.views} - self.decoding

    def counters(self) -> dict:
        return self.control.counters()
