"""KV reuse in the flow engine: prefix hits on other instances' caches, and the fetch
flow that brings a hit to the prefill before it starts."""

from __future__ import annotations

from dataclasses import dataclass

from testbed.lifecycle import RequestState
from testbed.model.kv import kv_bytes_per_token

REUSE = "reuse"  # the stage tag of a KV-reuse fetch flow (P2D flows carry their shards)


@dataclass(frozen=True)
class Fetch:
    holder: str
    prefill: str
    tier: int
    size: float
    expected_start: float  # of the prefill, as estimated when the fetch began
    layer_s: float


class PrefixFetch:
    """FlowSimulation's prefix-cache fetches."""

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
