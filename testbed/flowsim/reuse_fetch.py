"""KV reuse in the flow engine: prefix hits on other instances' caches, and the fetch
flow that brings a hit to the prefill before it starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from testbed.control.network_seam import SimulatedNetwork
from testbed.flowsim.events import EventLoop
from testbed.lifecycle import RequestState
from testbed.model.cache import HolderIndex
from testbed.model.extensions.compiled_cache import CompiledHolderIndex
from testbed.model.kv import ModelSpec, kv_bytes_per_token
from testbed.scenario import Scenario
from testbed.serving import DecodeInstance, PrefillInstance
from testbed.topologies.fattree import FatTreeSpec

REUSE = "reuse"  # the stage tag of a KV-reuse fetch flow (P2D flows carry their shards)


@dataclass(frozen=True)
class Fetch:
    holder: str
    prefill: str
    tier: int
    size: float
    expected_start: float  # of the prefill, as estimated when the fetch began
    layer_s: float


class FetchHost(Protocol):
    """What PrefixFetch uses of the class it is mixed into (FlowSimulation)."""

    scenario: Scenario
    spec: FatTreeSpec
    model: ModelSpec
    loop: EventLoop
    net: SimulatedNetwork
    prefill: dict[str, PrefillInstance]
    decode: dict[str, DecodeInstance]
    holders: HolderIndex | CompiledHolderIndex  # which decode caches hold a trace id
    fetches: dict[str, Fetch]  # request id -> its fetch in flight
    failed: set[str]  # decode instances that died
    reuse_bytes: float

    @property
    def _initial_level(self) -> int: ...

    def _reprioritize(self, reschedule_tick: bool = True) -> None: ...

    def _reschedule_network(self) -> None: ...


class PrefixFetch:
    """FlowSimulation's prefix-cache fetches (its host: a FetchHost)."""

    def _hits(self, req, names) -> dict[str, int]:
        """Cached prefix tokens of `req` on those of `names` that hold its first block
        (every other instance has none: HolderIndex)."""
        if not req.hash_ids:
            return {}
        held = self.holders.holders(req.hash_ids[0])
        return {n: self.decode[n].cache.prefix_hit_tokens(req.hash_ids, req.input_len)
                for n in held if n in names}

    def prefix_hits(self, req) -> dict[str, int]:
        live = [d.name for d in self.decode.values() if d.name not in self.failed]
        hits = self._hits(req, set(live))
        return {n: hits.get(n, 0) for n in live}

    def _fetch(self, rs: RequestState, holder: str, layer_s: float) -> None:
        """Stage 1: the reusable prefix's KV from its holder to the prefill, as one flow."""
        size = kv_bytes_per_token(self.model) * rs.reuse_tokens
        tier = self.spec.tier(rs.prefill, holder)
        self.fetches[rs.req.request_id] = Fetch(holder, rs.prefill, tier, size,
                                                rs.prefill_start, layer_s)
        (path,) = self.net.transfer_paths(holder, rs.prefill, self.scenario.network.ecmp, 1)
        self.net.add_flow(path, size, self.loop.now, tag=(rs, REUSE), level=self._initial_level)
        if self.scenario.network.flow_policy != "fair":
            self._reprioritize(reschedule_tick=False)
        self._reschedule_network()

    def _fetched(self, rs: RequestState) -> None:
        fetch = self.fetches.pop(rs.req.request_id)
        self.reuse_bytes += fetch.size
        self.prefill[rs.prefill].fetched(rs.req.request_id)
