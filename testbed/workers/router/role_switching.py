"""FlowKV-LA at the router: what the control plane's role switching
(testbed/control/roles.py) sees and does on packets.

The router samples from its own view: its prefill dispatch bookkeeping (what each prefill
node holds, what it is sending) and the decode instances' state reports. A switched
decode worker gets a `role` message, then prefill work while switched; a switched prefill
worker gets a `role` message, starts a decode engine (state reports, heartbeats) and is a
decode candidate while switched.
"""

from __future__ import annotations

from collections import defaultdict

from testbed.control.roles import RoleCycle
from testbed.serving import PrefillInstance


class RouterFlowKV(RoleCycle):
    def __init__(self, router):
        self.r = router
        super().__init__(router.scenario.flowkv, router.loop, router.prefill, router.views)
        self.held: dict[str, dict[str, int]] = defaultdict(dict)  # node -> request -> tokens
        names = [i.name for i in router.spec.instances]
        self.all_tiers = {(a, b): router.spec.tier(a, b) for a in names for b in names
                          if a != b}
        self.decode_pool = [i.name for i in router.spec.decode_pool]

    def dispatched(self, node: str, request: str, tokens: int) -> None:
        self.held[node][request] = tokens

    def prefilled(self, node: str, request: str) -> None:
        self.held[node].pop(request, None)

    def request_states(self):
        return None if self.r.finished else self.r.states.values()

    def prefill_reading(self, name: str) -> tuple[bool, int, int]:
        held = self.held[name]
        return bool(held), max(len(held) - 1, 0), sum(held.values())

    def live_decoders(self) -> list[str]:
        return [n for n in self.decode_pool if n not in self.r.plane.dead]

    def decode_reading(self, name: str) -> tuple[int, int, int, float, float]:
        r, v = self.r, self.r.views[name]
        return (v.batch, r.scenario.cluster.beta_max, v.queued + len(v.pending),
                v.free_memory - sum(v.pending.values()), r.scenario.cluster.memory_gb * 1e9)

    # -- the role engine ---------------------------------------------------------------
    def hybrid(self, name: str) -> PrefillInstance:
        return PrefillInstance(name, self.r.timing,  # the router's estimates for it
                               slowdown=self.r.scenario.cluster.slowdown.get(name, 1.0))

    def to_decode(self, name: str) -> None:
        if name not in self.r.views:
            self.r.add_view(name)
            self.r.faults.last_beat[name] = self.r.loop.now  # heartbeats start now

    def role(self, name: str, role: str) -> None:
        self.r.send(name, {"type": "role", "instance": name, "role": role})
