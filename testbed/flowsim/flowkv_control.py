"""FlowKV-LA in the flow simulator: what the control plane's role switching
(testbed/control/roles.py) sees and does here.

Every flowkv.cycle_s the engine samples each node's true state. A decode node switched to
prefill work gets its own prefill queue on the same GPU (prefill work holds its decode
iterations back: DecodeInstance.hold); a prefill node switched to decode work gets a
decode engine (empty cache) on the same GPU, its prefills still first.
"""

from __future__ import annotations

from testbed.control.roles import RoleCycle
from testbed.serving import PrefillInstance


class FlowKVControl(RoleCycle):
    def __init__(self, sim):
        self.sim = sim
        super().__init__(sim.scenario.flowkv, sim.loop, sim.prefill, sim.decode)

    def request_states(self):
        return self.sim.states

    def prefill_reading(self, name: str) -> tuple[bool, int, int]:
        p = self.sim.prefill[name]
        return p.busy is not None, len(p.queue), sum(j.rs.req.input_len for j in p.queue)

    def live_decoders(self) -> list[str]:
        sim = self.sim
        return [n for n in sim.decode if n not in sim.failed and n not in sim.prefill]

    def decode_reading(self, name: str) -> tuple[int, int, int, float, float]:
        d = self.sim.decode[name]
        return d.batch_size, d.beta_max, d.queued, d.free_memory, d.capacity

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
