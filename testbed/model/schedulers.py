"""Decode-instance schedulers: RR, LA, CA, CLA* and the NetKV ablation ladder (Algorithm 1).

One interface for all: `select(request, prefill, candidates, oracle)` returns a
`Decision`; `transfer_done(prefill, tier)` is the transfer-complete callback that
decrements NetKV's self-contention counter. Every scheduler applies Algorithm 1's
memory-feasibility filter first and rejects when nothing is feasible, so baselines and
NetKV differ only in how they rank feasible candidates.

The state a scheduler sees is what a real router sees: per-instance reports
(`Candidate`) and the last oracle snapshot; never per-flow network state. Candidates come
as a list or as a `CandidateTable` (the same reports as columns); every term is computed
for all of them at once on arrays, with the same equations (model/cost.py) and the same
IEEE arithmetic as one at a time, so a thousand-instance cluster costs one pass.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from testbed.model.candidates import Candidate, CandidateTable
from testbed.model.cost import transfer_time
from testbed.model.kv import effective_transfer_bytes
from testbed.model.loadgrid import CENSUS, KeyCensus
from testbed.model.oracle import Oracle
from testbed.model.scheduler_base import (
    OUT_OF_REACH,
    Decision,
    RequestInfo,
    Scheduler,
    SchedulerContext,
    SchedulerWrapper,
)

__all__ = [
    "SCHEDULERS", "CacheAware", "CacheLoadAware", "Candidate", "CandidateTable", "Decision",
    "FlowKVLoadAware", "LoadAware", "NetKV", "RequestInfo", "RoundRobin", "Scheduler",
    "SchedulerContext", "SchedulerWrapper", "make_scheduler", "switches_roles",
]


class RoundRobin(Scheduler):
    """RR: the next feasible instance in a fixed cyclic order."""

    name = "RR"

    def __init__(self, ctx: SchedulerContext):
        super().__init__(ctx)
        self._order: list[str] = []
        self._next = 0

    def rank(self, request, prefill, feasible, oracle):
        listed = feasible.names if isinstance(feasible, CandidateTable) else \
            [c.instance for c in feasible]
        names = {name: i for i, name in enumerate(listed)}
        for inst in sorted(names):
            if inst not in self._order:
                self._order.append(inst)
        n = len(self._order)
        for step in range(n):
            inst = self._order[(self._next + step) % n]
            if inst in names:
                self._next = (self._order.index(inst) + 1) % n
                return feasible[names[inst]], 0.0
        raise AssertionError("feasible set was not empty")


class LoadAware(Scheduler):
    """LA: minimise T_queue + T_decode."""

    name = "LA"

    def rank(self, request, prefill, feasible, oracle):
        return self.pick_min(feasible, self.load_time)

    def _table_key(self, request, prefill, table, oracle):
        return self.load_time(table)

    def _few_keys(self, request, prefill, table, oracle, rows, hit):
        return self._loads.rows(table, rows)


class CacheAware(Scheduler):
    """CA: maximise the prefix hit; load breaks ties."""

    name = "CA"

    def rank(self, request, prefill, feasible, oracle):
        best, _ = self.pick_min(feasible, lambda c: (-c.hit_tokens, self.load_time(c)))
        return best, -float(best.hit_tokens)


class CacheLoadAware(Scheduler):
    """CLA*: weighted cache + load score, as Mooncake's Conductor and llm-d's scorer chain.

    score = w_cache * lambda/l + w_load * (1 - min(1, (q_d + beta_d) / beta_max)); the
    paper tunes (w_cache, w_load) per workload: (1.0, 1.0) chatbot/RAG, (1.5, 0.7)
    long-context. Both terms are normalised to [0, 1] so the weights are comparable.
    """

    name = "CLA*"

    def __init__(self, ctx: SchedulerContext, w_cache: float = 1.0, w_load: float = 1.0):
        super().__init__(ctx)
        self.w_cache = w_cache
        self.w_load = w_load
        self._uncached: tuple[tuple, np.ndarray] | None = None  # see _uncached_key

    def score(self, request: RequestInfo, cand: Candidate | CandidateTable):
        cache = cand.hit_tokens / request.input_len
        busy = (cand.queued + cand.batch) / self.ctx.beta_max
        load = 1.0 - (np.minimum(1.0, busy) if isinstance(busy, np.ndarray) else min(1.0, busy))
        return self.w_cache * cache + self.w_load * load

    def rank(self, request, prefill, feasible, oracle):
        return self.pick_min(feasible, lambda c: -self.score(request, c))

    def _table_key(self, request, prefill, table, oracle):
        """-score for every row: read from the uncached rows' table by q_d + beta_d (the
        very numbers `score` gives them: a cache term of 0 adds nothing), the rows with
        a cached prefix scored in full."""
        busy = table.queued + table.batch
        if not len(busy) or busy.min() < 0 or request.input_len <= 0 \
                or type(self).score is not CacheLoadAware.score:  # scored as they are
            return -self.score(request, table)
        # q_d + beta_d past beta_max reads the last entry: a clipped index is the cap
        key = self._uncached_key().take(busy, mode="clip")
        hits = table.hit_rows
        if len(hits):
            key[hits] = -self.score(request, _Busy(busy[hits], table.hit_tokens[hits]))
        return key

    def _few_keys(self, request, prefill, table, oracle, rows, hit):
        """-score of each row, scored as one candidate."""
        queued, batch = table.queued.tolist(), table.batch.tolist()
        return [-self.score(request, _Scalars(queued[r], batch[r], hit[r])) for r in rows]

    def _uncached_key(self) -> np.ndarray:
        """-score of a candidate without a cached prefix, by q_d + beta_d (capped at
        beta_max: the load term is 0 from there on), computed by `score` itself for the
        weights as they are now."""
        now = (self.w_cache, self.w_load, self.ctx.beta_max)
        if self._uncached is None or self._uncached[0] != now:
            busy = np.arange(self.ctx.beta_max + 1, dtype=np.int64)
            self._uncached = (now, -self.score(RequestInfo("", 1, 0.0), _Busy(busy)))
        return self._uncached[1]


class _Scalars(NamedTuple):
    """What CLA*'s score reads of one candidate."""

    queued: int
    batch: int
    hit_tokens: int


@dataclass(frozen=True)
class _Busy:
    """What CLA*'s score reads of candidates, from their q_d + beta_d."""

    busy: np.ndarray
    hit_tokens: np.ndarray | int = 0
    batch: int = 0

    @property
    def queued(self) -> np.ndarray:
        return self.busy


class NetKV(Scheduler):
    """Algorithm 1: argmin of T_transfer + T_queue + T_decode over the feasible set.

    The ablation ladder switches the factors of B_eff: Topo-Only uses the static tier map
    only (c = 0, n_inflight = 0); Static adds the self-contention counter; Full adds the
    oracle's live congestion. The cost subsumes CLA*: cache enters through s_eff, load
    through T_queue.
    """

    MIRRORS = ("cost", "network_time", "effective_bytes")

    def __init__(self, ctx: SchedulerContext, use_inflight: bool, use_congestion: bool, name: str):
        super().__init__(ctx)
        self.use_inflight = use_inflight
        self.use_congestion = use_congestion
        self.name = name
        self._buffer = np.zeros(0)
        self._places = np.zeros(0, dtype=np.int64)

    def _grid(self, size: int) -> np.ndarray:
        """A scratch array of `size` for a decision's cost grid, kept between decisions."""
        if len(self._buffer) < size:
            self._buffer = np.zeros(max(size, 2 * len(self._buffer)))
        return self._buffer[:size]

    def _at(self, size: int) -> np.ndarray:
        """A scratch array of `size` for each row's place in that grid."""
        if len(self._places) < size:
            self._places = np.zeros(max(size, 2 * len(self._places)), dtype=np.int64)
        return self._places[:size]

    def cost(self, request: RequestInfo, prefill: str, cand: Candidate | CandidateTable,
             oracle: Oracle):
        net = self.network_time(
            request, prefill, cand, oracle, self.use_congestion, self.use_inflight
        )
        return net + self.load_time(cand)

    def _table_key(self, request, prefill, table, oracle):
        return self._table_costs(request, prefill, table, oracle)

    def _tier_list(self, prefill: str, root: CandidateTable, oracle: Oracle) -> list[int]:
        """The tier row from `prefill` over a whole table as a Python list."""
        _, _, row, _, extra = self._tier_entry(prefill, root, oracle)
        listed = extra.get("list")
        if listed is None:
            listed = extra["list"] = row.tolist()
        return listed

    def _tier_split(self, prefill: str, root: CandidateTable, oracle: Oracle
                    ) -> tuple[int, list[int], dict[int, int]] | None:
        """The tier most rows of a whole table are in from `prefill` (the rest of the
        fabric, in a fat-tree), and the other rows (its pod), as a list and each one's
        tier; None where more than FEW are outside it."""
        _, _, row, _, extra = self._tier_entry(prefill, root, oracle)
        if "split" not in extra:
            tier = int(np.bincount(row).argmax())
            near = np.flatnonzero(row != tier).tolist()
            extra["split"] = None if len(near) > self.FEW else (
                tier, near, dict(zip(near, row[near].tolist(), strict=True)))
        return extra["split"]

    # At most this many rows outside the largest tier (the prefill's pod in a fat-tree),
    # cached, or tied at the least cost for a pick by tiers; past it, the table pass.
    FEW = 64

    def _costs_as_built(self) -> bool:
        """Whether `cost` and its terms are NetKV's (its passes over a table compute
        them their own way)."""
        return all(getattr(type(self), name) is getattr(NetKV, name) for name in self.MIRRORS)

    def _few_keys(self, request, prefill, table, oracle, rows, hit):
        """`cost` of each row: its tier's transfer time of its s_eff plus its load."""
        loads = self._loads.rows(table, rows)
        if loads is None:
            return None
        tiers = self._tier_list(prefill, table, oracle)
        kv, length = request.kv_bytes, request.input_len
        uncached = effective_transfer_bytes(kv, 0, length)
        terms: dict[int, tuple[float, float]] = {}
        keys = []
        for row, load in zip(rows, loads, strict=True):
            tier = tiers[row]
            bandwidth_latency = terms.get(tier)
            if bandwidth_latency is None:
                bandwidth_latency = terms[tier] = self._tier_terms(
                    tier, prefill, oracle, self.use_congestion, self.use_inflight)
            tokens = hit[row]
            size = effective_transfer_bytes(kv, tokens, length) if tokens else uncached
            keys.append(transfer_time(size, *bandwidth_latency) + load)
        return keys

    def _pick_on_table(self, request, prefill, table, oracle):
        census = table.memo.get(CENSUS)
        if census is not None and type(self)._table_key is NetKV._table_key:
            picked = self._pick_by_tiers(request, prefill, table, oracle, *census)
            if picked is not None:
                return picked
        return super()._pick_on_table(request, prefill, table, oracle)

    def _pick_by_tiers(self, request: RequestInfo, prefill: str, table: CandidateTable,
                       oracle: Oracle, census: KeyCensus, version: int
                       ) -> tuple[Candidate, float] | None:
        """_pick_on_table's pick without a pass over the rows, for a table that comes with
        its board's load-key census: the uncached rows of the largest tier all cost its
        transfer time plus their load, so the cheapest of them hold the lowest key the
        census holds outside the other rows, which are few (the prefill's pod, the rows
        with a cached prefix) and costed one by one as in the table pass. The same
        minimum, the same tied rows in table order, the same draw; None (the table pass
        decides) where that does not hold: a census behind the table, many tied, cached
        or near rows, a later key whose load is not above the lowest's, no tied row in D_r."""
        if census.version != version or census.keyless or len(census) != len(table) \
                or table.base is not None:
            return None
        try:
            return self._least_by_tiers(request, prefill, table, oracle, census)
        except ValueError:  # an equation refusing: the table pass decides (and speaks)
            return None

    def _least_by_tiers(self, request, prefill, table, oracle, census):
        key = self._loads.keys(table)
        hits = table.hit_rows
        split = self._tier_split(prefill, table, oracle)
        if key is None or split is None or len(hits) > self.FEW:
            return None
        tier, near, near_tier = split
        _, present = self._tier_row(prefill, table, oracle)
        terms = [(1.0, 0.0)] * (present[-1] + 1)  # tiers not present: never looked up
        for t in present:
            terms[t] = self._tier_terms(t, prefill, oracle, self.use_congestion,
                                        self.use_inflight)
        kv, length = request.kv_bytes, request.input_len
        size = effective_transfer_bytes(kv, 0, length)
        net = [transfer_time(size, b, lat) for b, lat in terms]
        cached = dict(zip(hits.tolist(), table.hit_tokens[hits].tolist(), strict=True))
        apart = near + [r for r in cached if r not in near_tier]  # costed one by one
        apart_keys = key[apart].tolist()
        lowest = census.lowest(Counter(apart_keys))
        load, after = self._loads.values, self._loads.after
        best = float("inf")  # of the rest: the largest tier's uncached rows
        if lowest is not None:
            best = net[tier] + float(load[lowest])
            if not net[tier] + float(after[lowest]) > best:  # a later key may cost as much
                return None
        costs = []  # the same sums as the table pass's: a transfer time + the load
        for row, row_load in zip(apart, load[apart_keys].tolist(), strict=True):
            t = near_tier.get(row, tier)
            hit = cached.get(row)
            if hit is None:
                costs.append(net[t] + row_load)
            else:
                b, lat = terms[t]
                costs.append(transfer_time(effective_transfer_bytes(kv, hit, length), b, lat)
                             + row_load)
        low = min(best, min(costs, default=best))
        if not low < OUT_OF_REACH:
            return None
        tied = [r for r, c in zip(apart, costs, strict=True) if c == low]
        if best == low:
            if census.count[lowest] - apart_keys.count(lowest) + len(tied) > self.FEW:
                return None
            tied += [r for r in census.rows[lowest] if r not in near_tier and r not in cached]
        tied.sort()  # in table order, as the table pass finds them
        # D_r for the tied rows, as _fits_rows has it
        free, reserve = table.free_memory, self.ctx.memory_reserve_bytes
        uncached = size + reserve
        rows = [r for r in tied if free[r] >= (
            uncached if r not in cached
            else effective_transfer_bytes(kv, cached[r], length) + reserve)]
        if not rows:
            return None
        return table[rows[0] if len(rows) == 1 else self._rng.choice(rows)], low

    def rank(self, request, prefill, feasible, oracle):
        if isinstance(feasible, CandidateTable) and self._costs_as_built():
            costs = self._table_costs(request, prefill, feasible, oracle)
            if costs is not None:
                return self.pick_min(feasible, lambda _: costs)
        return self.pick_min(feasible, lambda c: self.cost(request, prefill, c, oracle))

    def _table_costs(self, request: RequestInfo, prefill: str, table: CandidateTable,
                     oracle: Oracle) -> np.ndarray | None:
        """`cost` for every row of `table`, the same numbers by fewer array passes: where
        nothing is cached a candidate costs its tier's transfer time plus its entry of
        the load grid (model/loadgrid.py), one lookup in a (tier, excess, batch) grid:
        per run of one tier where the rows come so (a fat-tree's, in name order), else
        by each row's offset into it; rows with a cached prefix get their own transfer
        time, the same sum."""
        root, rows = table.root()
        key = self._loads.keys(root)
        if key is None:
            return None
        load = self._loads.values
        width = len(load)
        tiers, present = self._tier_row(prefill, root, oracle)
        terms = [(1.0, 0.0)] * (present[-1] + 1)  # tiers not present: never looked up
        for tier in present:
            terms[tier] = self._tier_terms(tier, prefill, oracle, self.use_congestion,
                                           self.use_inflight)
        sizes = [effective_transfer_bytes(request.kv_bytes, 0, request.input_len)]
        hits = root.hit_rows
        one_length = False  # the cached rows all hit one prefix length: a size of theirs
        if len(hits):
            tokens, one_length = root.derived("hit-tokens", _hit_tokens)
            if one_length:
                sizes.append(effective_transfer_bytes(request.kv_bytes, int(tokens[0]),
                                                      request.input_len))
        # (size, tier) -> transfer time, each a float: a handful, not tiny arrays
        net = np.array([[transfer_time(size, b, lat) for b, lat in terms] for size in sizes])
        # a few runs of one tier, and few cached rows (each costed apart): a slice per run,
        # read from its tier's grid; many cached rows are cheaper moved into a second grid
        runs = self._tier_runs(prefill, root, oracle) if len(hits) <= len(key) >> 6 else None
        if runs is not None:
            grid = self._grid(len(terms) * width).reshape(len(terms), width)
            np.add(net[0][:, None], load, out=grid)
            costs = np.empty(len(key))
            for lo, hi, tier in runs:  # every key is in the grid (grown to hold them), so
                # 'clip' clips nothing; it only spares `out` the bounds check's buffer
                grid[tier].take(key[lo:hi], out=costs[lo:hi], mode="clip")
        elif len(terms) * width <= len(key):  # one lookup in a (size, tier, excess, batch) grid
            cells = len(terms) * width
            # each row's tier times the grid's width: where its tier's row of it starts
            offset, _ = self._tier_row(prefill, root, oracle, stride=width)
            at = self._at(len(key))
            np.add(offset, key, out=at)
            grid = self._grid(len(sizes) * cells)
            np.add(net[:, :, None], load, out=grid.reshape(len(sizes), len(terms), width))
            if one_length:  # the cached rows' entries lie in the second size's grid
                np.add.at(at, hits, cells)
                hits = hits[:0]  # costed with the rest
            costs = grid.take(at)
        else:
            costs = net[0][tiers] + load[key]
        if len(hits):  # the same sums as the grid's: a tier's transfer time + the load
            if one_length:
                hit_costs = net[1][tiers[hits]]
            else:
                s_eff = effective_transfer_bytes(request.kv_bytes, tokens, request.input_len)
                tier = tiers[hits]
                bandwidth, latency = np.array(terms).T
                hit_costs = transfer_time(s_eff, bandwidth[tier], latency[tier])
            hit_costs += load[key[hits]]
            costs[hits] = hit_costs
        return costs if rows is None else costs[rows]


def _hit_tokens(table: CandidateTable) -> tuple:
    """The rows with a cached prefix: their hit lengths, and whether these are all one."""
    tokens = table.hit_tokens[table.hit_rows]
    return tokens, tokens.min() == tokens.max()


class FlowKVLoadAware(Scheduler):
    """FlowKV-LA's decode choice in its normal regime: the smallest transfer latency from
    the chosen prefill node under the oracle's cost model (tier bandwidth and live
    congestion; FlowKV keeps no self-contention counter), load breaking ties. Prefill
    placement and role switching are the engines' controller cycle (model/flowkv.py)."""

    name = "FlowKV-LA"

    def rank(self, request, prefill, feasible, oracle):
        best, key = self.pick_min(feasible, lambda c: (
            self.network_time(request, prefill, c, oracle, use_inflight=False),
            self.load_time(c)))
        return best, key[0]


SCHEDULERS = {
    "rr": "RR",
    "la": "LA",
    "ca": "CA",
    "cla": "CLA*",
    "netkv-topo": "NetKV-Topo-Only",
    "netkv-static": "NetKV-Static",
    "netkv-full": "NetKV-Full",
    "flowkv": "FlowKV-LA",
}


ROLE_SWITCHING = {"flowkv"}  # schedulers that come with FlowKV's role-switching controller


def switches_roles(key: str) -> bool:
    """Whether scheduler `key` runs with role switching: any instance may then prefill or
    decode, and send KV to any other."""
    return key in ROLE_SWITCHING


def make_scheduler(
    key: str, ctx: SchedulerContext, cla_weights: tuple[float, float] = (1.0, 1.0)
) -> Scheduler:
    """Build a scheduler from its scenario key (see SCHEDULERS)."""
    if key == "rr":
        return RoundRobin(ctx)
    if key == "la":
        return LoadAware(ctx)
    if key == "ca":
        return CacheAware(ctx)
    if key == "cla":
        return CacheLoadAware(ctx, *cla_weights)
    if key == "netkv-topo":
        return NetKV(ctx, use_inflight=False, use_congestion=False, name=SCHEDULERS[key])
    if key == "netkv-static":
        return NetKV(ctx, use_inflight=True, use_congestion=False, name=SCHEDULERS[key])
    if key == "netkv-full":
        return NetKV(ctx, use_inflight=True, use_congestion=True, name=SCHEDULERS[key])
    if key == "flowkv":
        return FlowKVLoadAware(ctx)
    raise ValueError(f"unknown scheduler {key!r}; choose one of {', '.join(SCHEDULERS)}")
