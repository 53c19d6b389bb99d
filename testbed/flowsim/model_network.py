"""The fluid network with a network model in place of max-min sharing
(testbed/model/extensions/network_models.py): a transfer's shards get constant rates when it
starts, from the seconds the model says it takes, and end together.

Everything else is the fluid network's: paths and ECMP, the links' byte counters (a
model that ignores sharing may send more than a link carries: the link samples show what
it sent), background for the oracle, the lifecycle of flows. Nothing re-times a flow once
it is sending: faults, priority levels and re-prioritisation leave its rate alone.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from testbed.flowsim.compiled_sharing import NativeFluidNetwork, available
from testbed.flowsim.links import Flow, Hop
from testbed.flowsim.network import FluidNetwork
from testbed.model import tcp as tcpmodel
from testbed.model.cost import gbps_to_bytes_per_s
from testbed.model.extensions import network_models as nm
from testbed.topologies.fattree import FatTreeSpec


def flow_network(spec: FatTreeSpec, rng: random.Random | None,
                 capacity_factor: dict[int, float] | None, tcp: tcpmodel.TcpParams | None,
                 rtt_exponent: float, model: str = nm.MAX_MIN,
                 timeout_s: float = 1.0) -> FluidNetwork:
    """The network a flow-engine run (or a replay) times its transfers on: max-min
    sharing with the TCP terms (compiled where a compiler is, else in Python), or the
    model `model` names."""
    if nm.is_max_min(model):
        network = NativeFluidNetwork if available() else FluidNetwork
        return network(spec, rng, capacity_factor, tcp, rtt_exponent)
    factor = capacity_factor or {}
    ctx = nm.NetworkModelContext(
        {t: gbps_to_bytes_per_s(bw) * factor.get(t, 1.0)
         for t, bw in spec.tier_bandwidth_gbps.items()},
        {t: us * 1e-6 for t, us in spec.tier_latency_us.items()}, tcp)
    return ModelNetwork(spec, rng, capacity_factor, nm.build(model, ctx, timeout_s), ctx)


class ModelNetwork(FluidNetwork):
    """Rates fixed at a transfer's start by a network model. A transfer is its shards'
    `group` (the flow engine adds them in one call; a replay one by one, at the starts
    the packets recorded): the model times it whole once, at its first shard, and every
    shard of it takes those seconds from its own start."""

    def __init__(self, spec: FatTreeSpec, rng: random.Random | None,
                 capacity_factor: dict[int, float] | None, model, ctx: nm.NetworkModelContext):
        super().__init__(spec, rng, capacity_factor)
        self.model = model
        self.ctx = ctx
        self._member: dict[int, tuple[int, int, object]] = {}  # flow -> transfer, n, key
        self._numbers: dict[object, int] = {}  # a transfer's group key -> its number
        self._seconds: dict[int, float] = {}  # transfer -> what the model said, while live
        self._live: dict[int, int] = {}  # transfer -> its flows on the network
        self._next_transfer = 0
        self._link_views: dict[int, nm.Link] = {}

    def add_flow(self, path: list[Hop], size: float, now: float, tag: object = None,
                 level: int = 0, shard: tuple[int, int] = (0, 1), share: bool = True,
                 streams: int = 1, group: object = None) -> Flow:
        flow = super().add_flow(path, size, now, tag, level, shard, share=False,
                                streams=streams, group=group)
        key = group if group is not None else ("flow", flow.flow_id)
        number = self._numbers.get(key)
        if number is None:
            number = self._numbers[key] = self._next_transfer
            self._next_transfer += 1
        self._live[number] = self._live.get(number, 0) + 1
        self._member[flow.flow_id] = (number, shard[1], key)
        if share:
            self.recompute(path, changed=[flow])
        return flow

    def recompute(self, touched: Iterable[Hop] | None = None,
                  changed: Iterable[Flow] | None = None) -> None:
        """Times the flows that just arrived; nothing else changes a rate."""
        fresh = [f for f in changed or () if f.flow_id in self.flows and f.rate == 0.0
                 and f.due is None]
        if fresh:
            self._time(fresh)
        elif touched is None and changed is None:  # a flow may have moved path (a fault)
            self._relink()

    def _recompute_links(self, touched, gone=(), changed=None) -> None:
        """Flows that left take their rates off their links; no one else's moves."""
        now = self.last_update
        for flow in gone:
            number, _n, key = self._member.pop(flow.flow_id)
            self._live[number] -= 1
            if not self._live[number]:
                del self._live[number], self._numbers[key]
                self._seconds.pop(number, None)
            for h in flow.links:
                link = self.link_list[h]
                link.settle(now)
                link.kv_rate = max(0.0, link.kv_rate - flow.rate) if link.flows else 0.0

    def _relink(self) -> None:
        now = self.last_update
        rates = [0.0] * len(self.link_list)
        for flow in self.flows.values():
            for h in flow.links:
                rates[h] += flow.rate
        for link, rate in zip(self.link_list, rates, strict=True):
            if rate != link.kv_rate:
                link.settle(now)
                link.kv_rate = rate

    def _time(self, flows: list[Flow]) -> None:
        by: dict[int, list[Flow]] = {}
        for flow in flows:
            by.setdefault(self._member[flow.flow_id][0], []).append(flow)
        now = self.last_update
        for number, mine in by.items():
            seconds = self._seconds.get(number)
            if seconds is None:
                seconds = self._seconds[number] = self._ask(number, mine)
            for flow in mine:
                rate = flow.size / seconds
                for h in flow.links:
                    link = self.link_list[h]
                    link.settle(now)
                    link.kv_rate += rate
                self._set_rate(flow, rate)

    def _ask(self, number: int, flows: list[Flow]) -> float:
        """The model's seconds for the transfer whose first shards `flows` are (its bytes
        counted for all its shards: a replay's others arrive later)."""
        n = self._member[flows[0].flow_id][1]
        carried = sum(f.weight for f in flows)  # shards these flows carry
        links = {h for f in flows for h in f.links}
        others = sorted(fid for h in links for fid in self.link_list[h].flows
                        if self._member[fid][0] != number)
        sharing = [self._shared(self.flows[fid]) for fid in dict.fromkeys(others)]
        paths = tuple(self._view(f.links) for f in flows)
        tier = max((link.tier for path in paths for link in path), default=0)
        latency = self.ctx.tier_latency_s.get(tier, 0.0)
        size = sum(f.size for f in flows) * n / carried
        rtt = (tcpmodel.path_rtt(latency, [self.link_list[h].capacity for h in flows[0].links],
                                 self.ctx.tcp, size / n) if self.ctx.tcp else 2.0 * latency)
        transfer = nm.Transfer(size, n, tier,
                               self.ctx.tier_bandwidth.get(tier, 0.0), latency, rtt, paths,
                               self.last_update)
        return self.model.transfer_time(transfer, sharing)

    def _shared(self, flow: Flow) -> nm.SharedFlow:
        self._settle(flow)
        return nm.SharedFlow(self._member[flow.flow_id][0], flow.remaining,
                             flow.rate, self._view(flow.links), flow.start)

    def _view(self, indices: tuple[int, ...]) -> tuple[nm.Link, ...]:
        out = []
        for h in indices:
            view = self._link_views.get(h)
            if view is None:
                link = self.link_list[h]
                view = self._link_views[h] = nm.Link(f"{link.hop[0]}>{link.hop[1]}",
                                                     link.tier, link.capacity)
            out.append(view)
        return tuple(out)

    def faults(self) -> dict[str, int] | None:
        """A plugin's faults under the guard (None for a built-in)."""
        report = getattr(self.model, "report", None)
        return report() if report else None
