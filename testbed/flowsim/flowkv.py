"""FlowKV-LA in the flow simulator: the global controller's cycle and hybrid nodes.

Every flowkv.cycle_s the engine samples each node's state and hands it to the model's
Controller (testbed.model.flowkv), which smooths, scores, plans and switches: in the
imbalanced and extreme regimes the idle nodes of the lightly loaded role take the other
role's work for switch_cycles cycles (or until load is normal again).

- A decode node switched to prefill work gets its own prefill queue on the same GPU:
  prefill work holds its decode iterations back (DecodeInstance.hold), and a request it
  prefills is decoded there when it has the memory (no network transfer).
- A prefill node switched to decode work gets a decode engine (empty cache) and becomes
  a decode candidate; its prefills still come first on its GPU. When it returns it takes
  no new decode work and finishes its batch.
"""

from __future__ import annotations

from collections import Counter

from testbed.model import flowkv
from testbed.serving import PrefillInstance


class FlowKVControl:
    def __init__(self, sim):
        self.sim = sim
        self.cfg = sim.scenario.flowkv
        self.control = self.cfg.controller(sim.prefill, sim.decode)
        self.hybrid: dict[str, PrefillInstance] = {}  # decode node -> its prefill queue
        self.accepting: set[str] = set()  # switched decode nodes taking prefill work
        self.decoding: set[str] = set()  # switched prefill nodes taking decode work

    def start(self) -> None:
        self.sim.loop.after(self.cfg.cycle_s, self.cycle)

    def choose_prefill(self, tokens: int, now: float) -> PrefillInstance:
        """The node with the smallest expected TTFT (its queue and its own compute)."""
        targets = [*self.sim.prefill.values(), *(self.hybrid[n] for n in sorted(self.accepting))]
        return flowkv.fastest_prefill(targets, tokens, now)

    def cycle(self) -> None:
        sim, now = self.sim, self.sim.loop.now
        sending = Counter(rs.prefill for rs in sim.states
                          if rs.transfer_start is not None and rs.transfer_end is None
                          and rs.state is None)
        samples = {name: flowkv.prefill_node_state(
            p.busy is not None, len(p.queue), sending[name],
            sum(j.rs.req.input_len for j in p.queue), self.cfg.token_budget)
            for name, p in sim.prefill.items()}
        live = [n for n in sim.decode if n not in sim.failed and n not in sim.prefill]
        for name in live:
            d = sim.decode[name]
            samples[name] = flowkv.decode_node_state(d.batch_size, d.beta_max, d.queued,
                                                     d.free_memory, d.capacity)
        new, back = self.control.step(now, samples, live, [*live, *sim.prefill])
        for name in new:
            if name in sim.prefill:  # prefill -> decode work
                if name not in sim.decode:
                    sim.decode[name] = sim.new_decoder(name)
                    sim.prefill[name].on_busy = sim.decode[name].hold
                self.decoding.add(name)
                continue
            if name not in self.hybrid:
                dec = sim.decode[name]
                self.hybrid[name] = PrefillInstance(
                    name, sim.timing, sim.model.n_layers, sim.loop, sim._prefill_done,
                    sim.scenario.cluster.slowdown.get(name, 1.0), on_busy=dec.hold)
            self.accepting.add(name)
        self.accepting -= set(back)
        self.accepting &= set(live)
        self.decoding -= set(back)
        sim.loop.after(self.cfg.cycle_s, self.cycle)

    def closed_decoders(self) -> set[str]:
        """Prefill nodes with a decode engine that take no decode work now."""
        return {n for n in self.sim.prefill if n in self.sim.decode} - self.decoding

    def counters(self) -> dict:
        return self.control.counters()
