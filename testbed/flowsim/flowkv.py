"""FlowKV-LA in the flow simulator: what the control plane's role switching
(testbed/control/roles.py) sees and does here.

Every flowkv.cycle_s the engine samples each node's true state. A decode node switched to
prefill work gets its own prefill queue on the same GPU (prefill work holds its decode
iterations back: DecodeInstance.hold); a prefill node switched to decode work gets a
decode engine (empty cache) on the same GPU, its prefills still first.
"""

from __future__ import annotations

from testbed.control.roles import RoleCycle, sending_counts
from testbed.model import flowkv
from testbed.serving import PrefillInstance


class FlowKVControl(RoleCycle):
    def __init__(self, sim):
        self.sim = sim
        super().__init__(sim.scenario.flowkv, sim.loop, sim.prefill, sim.decode)

    def sample(self) -> tuple[dict, list[str]]:
        sim = self.sim
        sending = sending_counts(sim.states)
        samples = {name: flowkv.prefill_node_state(
            p.busy is not None, len(p.queue), sending[name],
            sum(j.rs.req.input_len for j in p.queue), self.cfg.token_budget)
            for name, p in sim.prefill.items()}
        live = [n for n in sim.decode if n not in sim.failed and n not in sim.prefill]
        for name in live:
            d = sim.decode[name]
            samples[name] = flowkv.decode_node_state(d.batch_size, d.beta_max, d.queued,
                                                     d.free_memory, d.capacity)
        return samples, live

    # -- the role engine ---------------------------------------------------------------
    def hybrid(self, name: str) -> PrefillInstance:
        sim = self.sim
        return PrefillInstance(name, sim.timing, sim.model.n_layers, sim.loop,
                               sim.prefill_done, sim.scenario.cluster.slowdown.get(name, 1.0),
                               on_busy=sim.decode[name].hold)

    def to_decode(self, name: str) -> None:
        sim = self.sim
        if name not in sim.decode:
            sim.decode[name] = sim.new_decoder(name)
            sim.prefill[name].on_busy = sim.decode[name].hold

    def role(self, name: str, role: str) -> None:
        pass  # nobody to tell: the simulator's instances are the nodes
