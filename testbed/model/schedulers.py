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

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from testbed.model.candidates import Candidate, CandidateTable
from testbed.model.cost import (
    effective_bandwidth,
    first_decode_time,
    queue_delay,
    transfer_time,
)
from testbed.model.inflight import InflightCounter
from testbed.model.kv import effective_transfer_bytes
from testbed.model.loadgrid import LoadGrid
from testbed.model.oracle import Oracle
from testbed.model.timing import TimingModel


@dataclass(frozen=True)
class RequestInfo:
    request_id: str
    input_len: int
    kv_bytes: float  # s_r, aggregate over TP shards


@dataclass(frozen=True)
class Decision:
    decode: str | None
    tier: int | None = None
    effective_bytes: float = 0.0
    hit_tokens: int = 0
    predicted_transfer_s: float = 0.0
    predicted_cost_s: float = 0.0
    reason: str = "ok"
    fault: str = ""  # why the scheduler's own choice was replaced (model/guard.py)

    @property
    def rejected(self) -> bool:
        return self.decode is None


@dataclass(frozen=True)
class SchedulerContext:
    timing: TimingModel
    beta_max: int = 64
    memory_reserve_bytes: float = 0.0  # m_min
    inflight_cap: int = 16
    seed: int = 0  # for breaking exact ties without a bias toward any instance or tier


class Scheduler:
    """Base: feasibility filter, decision bookkeeping, the transfer-done callback."""

    name = "base"

    def __init__(self, ctx: SchedulerContext):
        self.ctx = ctx
        self.inflight = InflightCounter(cap=ctx.inflight_cap)
        self._rng = random.Random(ctx.seed)
        self._tier_rows: dict[tuple[str, int], tuple[tuple, object, np.ndarray, list]] = {}
        self._terms: dict | None = None  # a tier's B_eff and latency, during one select()
        self._offsets: dict[int, tuple[np.ndarray, int, np.ndarray]] = {}

    @property
    def rng(self) -> random.Random:
        """A generator seeded from the run's seed: draws repeat run to run."""
        return self._rng

    # Fewer candidates than this are ranked one at a time: arrays cost more than they
    # save on a dozen (the packet router's decision stays in microseconds).
    SMALL = 32

    def pick_min(self, feasible: list[Candidate] | CandidateTable,
                 key: Callable) -> tuple[Candidate, float | tuple]:
        """argmin of `key` (a number or a tuple compared in order; given one candidate or
        a table, it returns a number or a column) with exact ties broken by a seeded draw,
        never by list order.

        List order follows instance names, which follow the topology: breaking ties by it
        would quietly make a topology-blind baseline prefer one tier.
        """
        if not isinstance(feasible, CandidateTable):
            keys = [key(c) for c in feasible]
            best = min(keys)
            tied = [c for c, k in zip(feasible, keys, strict=True) if k == best]
            chosen = tied[0] if len(tied) == 1 else self._rng.choice(tied)
            return chosen, best
        columns = key(feasible)
        columns = columns if isinstance(columns, tuple) else (columns,)
        tied = None  # rows still tied, in table order (None: all of them)
        best = []
        for column in columns:
            values = np.broadcast_to(column, (len(feasible),))
            values = values if tied is None else values[tied]
            low = values.min()
            best.append(float(low))
            at = np.flatnonzero(values == low)
            tied = at if tied is None else tied[at]
        rows = tied.tolist()
        chosen = rows[0] if len(rows) == 1 else self._rng.choice(rows)
        return feasible[chosen], (best[0] if len(best) == 1 else tuple(best))

    # -- shared terms (one candidate, or a table of them) ------------------------------
    def effective_bytes(self, request: RequestInfo, cand: Candidate | CandidateTable):
        if isinstance(cand, CandidateTable) and self._terms is not None:
            # within one decision: once for the whole set, taken by the rows of a cut
            root, rows = cand.root()
            hit = self._terms.get("s_eff")
            if hit is None or hit[0] is not root:
                hit = self._terms["s_eff"] = (root, effective_transfer_bytes(
                    request.kv_bytes, root.hit_tokens, request.input_len))
            return hit[1] if rows is None else hit[1][rows]
        return effective_transfer_bytes(request.kv_bytes, cand.hit_tokens, request.input_len)

    def load_time(self, cand: Candidate | CandidateTable):
        """T_queue + T_decode (eqs. 6-7): the post-transfer wait on this instance."""
        timing = self.ctx.timing
        t_queue = queue_delay(
            cand.queued, cand.batch, self.ctx.beta_max, timing.iteration_time(cand.batch)
        )
        return t_queue + first_decode_time(timing.iteration_time(cand.batch + 1))

    def network_time(
        self, request: RequestInfo, prefill: str, cand: Candidate | CandidateTable,
        oracle: Oracle, use_congestion: bool = True, use_inflight: bool = True,
    ):
        """T_transfer (eq. 3) with B_eff (eq. 4), each factor switchable for the ablation."""
        size = self.effective_bytes(request, cand)
        if isinstance(cand, Candidate):
            return self._tier_transfer_time(size, oracle.tier(prefill, cand.instance), prefill,
                                            oracle, use_congestion, use_inflight)
        tiers, present = self._tier_row(prefill, cand, oracle)
        bandwidth, latency = np.ones(present[-1] + 1), np.zeros(present[-1] + 1)
        for tier in present:  # each candidate gets its tier's terms: one gather, no masks
            bandwidth[tier], latency[tier] = self._tier_terms(tier, prefill, oracle,
                                                              use_congestion, use_inflight)
        return transfer_time(size, bandwidth[tiers], latency[tiers])

    def _tier_transfer_time(self, size, tier: int, prefill: str, oracle: Oracle,
                            use_congestion: bool, use_inflight: bool):
        return transfer_time(size, *self._tier_terms(tier, prefill, oracle, use_congestion,
                                                     use_inflight))

    def _tier_terms(self, tier: int, prefill: str, oracle: Oracle, use_congestion: bool,
                    use_inflight: bool) -> tuple[float, float]:
        """B_eff (eq. 4) and the latency of `tier` from `prefill`, once per decision."""
        key = (tier, use_congestion, use_inflight)
        terms = self._terms.get(key) if self._terms is not None else None
        if terms is None:
            congestion = oracle.congestion_of(tier) if use_congestion else 0.0
            n = self.inflight.get(tier, prefill) if use_inflight else 0
            terms = (effective_bandwidth(oracle.bandwidth(tier), congestion, n),
                     oracle.latency(tier))
            if self._terms is not None:
                self._terms[key] = terms
        return terms

    def _tier_row(self, prefill: str, table: CandidateTable, oracle: Oracle
                  ) -> tuple[np.ndarray, list[int]]:
        """The oracle's tier from `prefill` to each candidate of `table`, and the tiers of
        the whole set it was cut from (a superset of the table's), remembered per tier map
        for that set (an engine passes the same names while its candidate set does not
        change)."""
        root, rows = table.root()
        names = root.names
        key = (prefill, id(names))  # the entry holds `names`, so the id stays its own
        hit = self._tier_rows.get(key)
        if hit is None or hit[0] is not names or hit[1] is not oracle.tier_map:
            if len(self._tier_rows) > 4096:
                self._tier_rows.clear()
            on_arrays = getattr(oracle.tier_map, "row", None)  # topologies' TierMap
            row = on_arrays(prefill, names) if on_arrays else np.array(
                [oracle.tier(prefill, n) for n in names], dtype=np.int64)
            present = np.flatnonzero(np.bincount(row)).tolist()  # np.unique, for 0..3
            hit = self._tier_rows[key] = (names, oracle.tier_map, row, present)
        return (hit[2] if rows is None else hit[2][rows]), hit[3]

    def _tier_offsets(self, prefill: str, table: CandidateTable, oracle: Oracle,
                      width: int) -> np.ndarray:
        """_tier_row times `width`: each row's start in a (tier, `width`) grid, kept with
        the row while the width holds."""
        tiers, _ = self._tier_row(prefill, table, oracle)
        hit = self._offsets.get(id(tiers))
        if hit is None or hit[0] is not tiers or hit[1] != width:
            if len(self._offsets) > 4096:
                self._offsets.clear()
            hit = self._offsets[id(tiers)] = (tiers, width, tiers * width)
        return hit[2]

    def feasible(self, request: RequestInfo, candidates: Sequence[Candidate] | CandidateTable
                 ) -> list[Candidate] | CandidateTable:
        """D_r = {d | m_d >= s_eff(d) + m_min} (Algorithm 1, line 1): a table if many, a
        list if few (see SMALL)."""
        if isinstance(candidates, CandidateTable) and len(candidates) >= self.SMALL:
            return candidates.where(self._fits(request, candidates))
        reserve = self.ctx.memory_reserve_bytes
        return [c for c in candidates
                if c.free_memory >= self.effective_bytes(request, c) + reserve]

    def _fits(self, request: RequestInfo, table: CandidateTable) -> np.ndarray:
        """Which rows of `table` are in D_r (a mask)."""
        reserve = self.ctx.memory_reserve_bytes
        if table.base is not None:
            return table.free_memory >= self.effective_bytes(request, table) + reserve
        # s_eff is s_r wherever nothing is cached: one threshold, then the hit rows
        fits = table.free_memory >= effective_transfer_bytes(
            request.kv_bytes, 0, request.input_len) + reserve
        hits = table.hit_rows
        if len(hits):
            fits[hits] = table.free_memory[hits] >= effective_transfer_bytes(
                request.kv_bytes, table.hit_tokens[hits], request.input_len) + reserve
        return fits

    # -- the interface -------------------------------------------------------------
    def select(
        self, request: RequestInfo, prefill: str,
        candidates: Sequence[Candidate] | CandidateTable, oracle: Oracle
    ) -> Decision:
        self._terms = {}  # one request, prefill, oracle, in-flight count until the end
        try:
            if isinstance(candidates, CandidateTable) and candidates.base is None \
                    and len(candidates) >= self.SMALL and self._by_whole_table():
                picked = self._pick_on_table(request, prefill, candidates, oracle)
                if picked is not None:  # committed while this decision's terms stand
                    return self.commit(request, prefill, picked[0], oracle, picked[1])
            feasible = self.feasible(request, candidates)
            if not len(feasible):
                return Decision(None, reason="no decode instance has memory for the KV cache")
            chosen, cost = self.rank(request, prefill, feasible, oracle)
        finally:
            self._terms = None
        return self.commit(request, prefill, chosen, oracle, cost)

    def _by_whole_table(self) -> bool:
        """Whether this scheduler ranks by the one-column key it gives a whole table
        (_table_key): a subclass, such as a plugin, that overrides rank() or feasible()
        is asked through them."""
        cls = type(self)
        return cls.rank in _TABLE_RANKS and cls.feasible is Scheduler.feasible

    def _pick_on_table(self, request: RequestInfo, prefill: str, table: CandidateTable,
                       oracle: Oracle) -> tuple[Candidate, float] | None:
        """feasible() then rank() in fewer passes, with the same result and the same
        draws: every row keyed, the infeasible pushed out of reach, no cut made. The tied
        rows come in table order as a cut's would, so the seeded draw picks the same one.
        None where that shortcut does not hold (nothing feasible below the push, a key
        that is not a number): the general path decides and speaks."""
        keyed = self._table_key(request, prefill, table, oracle)
        if keyed is None:
            return None
        pushed, key = keyed
        low = pushed.min()
        if not low < _OUT_OF_REACH:
            return None
        rows = np.flatnonzero(pushed == low).tolist()
        return table[rows[0] if len(rows) == 1 else self._rng.choice(rows)], float(key[rows[0]])

    def _table_key(self, request: RequestInfo, prefill: str, table: CandidateTable,
                   oracle: Oracle) -> tuple[np.ndarray, np.ndarray] | None:
        """rank()'s key for every row of a whole table with the rows outside D_r pushed
        out of reach, and the key as the cost is reported from (see _push); None if this
        scheduler has no one-column key."""
        return None

    def _push(self, request: RequestInfo, table: CandidateTable, key
              ) -> tuple[np.ndarray, np.ndarray]:
        """`key` with the rows outside D_r pushed by _OUT_OF_REACH through an add, not a
        masked write (the mask is random, the add is not), and `key` itself (an add
        turns -0.0 into 0.0: the reported cost keeps its sign)."""
        key = np.broadcast_to(key, (len(table),))
        return key + np.logical_not(self._fits(request, table)) * _OUT_OF_REACH, key

    def commit(self, request: RequestInfo, prefill: str, chosen: Candidate, oracle: Oracle,
               cost: float = 0.0) -> Decision:
        """The decision for `chosen`, its transfer counted in flight (a decision taken
        elsewhere, model/follow.py, is committed the same way)."""
        tier = oracle.tier(prefill, chosen.instance)
        decision = Decision(
            decode=chosen.instance,
            tier=tier,
            effective_bytes=self.effective_bytes(request, chosen),
            hit_tokens=chosen.hit_tokens,
            predicted_transfer_s=self.network_time(request, prefill, chosen, oracle),
            predicted_cost_s=cost,
        )
        self.inflight.increment(tier, prefill)  # Algorithm 1, line 14
        return decision

    def transfer_done(self, prefill: str, tier: int) -> None:
        self.inflight.decrement(tier, prefill)

    def rank(
        self, request: RequestInfo, prefill: str, feasible: list[Candidate] | CandidateTable,
        oracle: Oracle
    ) -> tuple[Candidate, float]:
        raise NotImplementedError


class SchedulerWrapper:
    """A scheduler around another (a guard, recorded decisions): what it does not
    override is the inner one's, its feasibility filter, cost terms and counters, which
    the control plane also reads."""

    def __init__(self, inner: Scheduler):
        self.inner = inner

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    @property
    def name(self) -> str:
        return self.inner.name


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
        return self._push(request, table, self.load_time(table))


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

    def score(self, request: RequestInfo, cand: Candidate | CandidateTable):
        cache = cand.hit_tokens / request.input_len
        busy = (cand.queued + cand.batch) / self.ctx.beta_max
        load = 1.0 - (np.minimum(1.0, busy) if isinstance(busy, np.ndarray) else min(1.0, busy))
        return self.w_cache * cache + self.w_load * load

    def rank(self, request, prefill, feasible, oracle):
        return self.pick_min(feasible, lambda c: -self.score(request, c))

    def _table_key(self, request, prefill, table, oracle):
        return self._push(request, table, -self.score(request, table))


class NetKV(Scheduler):
    """Algorithm 1: argmin of T_transfer + T_queue + T_decode over the feasible set.

    The ablation ladder switches the factors of B_eff: Topo-Only uses the static tier map
    only (c = 0, n_inflight = 0); Static adds the self-contention counter; Full adds the
    oracle's live congestion. The cost subsumes CLA*: cache enters through s_eff, load
    through T_queue.
    """

    def __init__(self, ctx: SchedulerContext, use_inflight: bool, use_congestion: bool, name: str):
        super().__init__(ctx)
        self.use_inflight = use_inflight
        self.use_congestion = use_congestion
        self.name = name
        self._loads = LoadGrid(self.load_time, ctx.beta_max)

    def cost(self, request: RequestInfo, prefill: str, cand: Candidate | CandidateTable,
             oracle: Oracle):
        net = self.network_time(
            request, prefill, cand, oracle, self.use_congestion, self.use_inflight
        )
        return net + self.load_time(cand)

    def _table_key(self, request, prefill, table, oracle):
        costs = self._table_costs(request, prefill, table, oracle, feasible_only=True)
        return None if costs is None else (costs, costs)  # positive: an add keeps them

    def rank(self, request, prefill, feasible, oracle):
        if isinstance(feasible, CandidateTable):
            costs = self._table_costs(request, prefill, feasible, oracle)
            if costs is not None:
                return self.pick_min(feasible, lambda _: costs)
        return self.pick_min(feasible, lambda c: self.cost(request, prefill, c, oracle))

    def _table_costs(self, request: RequestInfo, prefill: str, table: CandidateTable,
                     oracle: Oracle, feasible_only: bool = False) -> np.ndarray | None:
        """`cost` for every row of `table`, the same numbers by fewer array passes: where
        nothing is cached a candidate costs its tier's transfer time plus its entry of
        the load grid (model/loadgrid.py), one lookup in a (tier, excess, batch) grid;
        rows with a cached prefix get their own transfer time. `feasible_only` (a whole
        table): rows outside D_r get _OUT_OF_REACH added (+inf with a prefix)."""
        root, rows = table.root()
        key = self._loads.keys(root)
        if key is None:
            return None
        load = self._loads.values
        tiers, present = self._tier_row(prefill, root, oracle)
        size = effective_transfer_bytes(request.kv_bytes, 0, request.input_len)
        terms = [(1.0, 0.0)] * (present[-1] + 1)  # tiers not present: never looked up
        for tier in present:
            terms[tier] = self._tier_terms(tier, prefill, oracle, self.use_congestion,
                                           self.use_inflight)
        bandwidth, latency = np.array(terms).T
        net = transfer_time(size, bandwidth, latency)
        if len(net) * len(load) <= len(key):  # one lookup in a (tier, excess, batch) grid
            costs = (net[:, None] + load).ravel()[self._tier_offsets(prefill, root, oracle,
                                                                     len(load)) + key]
        else:
            costs = net[tiers] + load[key]
        reserve = self.ctx.memory_reserve_bytes
        if feasible_only:  # arithmetic, not a masked write: the mask is random, the add not
            costs += np.logical_not(root.free_memory >= size + reserve) * _OUT_OF_REACH
        hits = root.hit_rows
        if len(hits):
            tokens, one_length, free, hit_key = root.derived(
                ("hits", self._loads.beta_max), lambda t: _hit_columns(t, key))
            at = tiers[hits]
            if one_length:  # one cached-prefix length: costed once per tier
                s_eff = effective_transfer_bytes(request.kv_bytes, tokens[:1],
                                                 request.input_len)
                hit_costs = transfer_time(s_eff, bandwidth, latency)[at]
            else:
                s_eff = effective_transfer_bytes(request.kv_bytes, tokens, request.input_len)
                hit_costs = transfer_time(s_eff, bandwidth[at], latency[at])
            hit_costs += load[hit_key]
            if feasible_only:
                hit_costs[np.logical_not(free >= s_eff + reserve)] = np.inf
            costs[hits] = hit_costs
        return costs if rows is None else costs[rows]


def _hit_columns(table: CandidateTable, key: np.ndarray) -> tuple:
    """For the rows with a cached prefix: their hit lengths, whether these are all one,
    their free memory and load-grid keys."""
    rows = table.hit_rows
    tokens = table.hit_tokens[rows]
    return tokens, tokens.min() == tokens.max(), table.free_memory[rows], key[rows]


# What an infeasible row's cost is pushed by in one table pass (finite: inf * 0 is nan):
# no feasible cost comes near it, and anything at or above it goes the general way.
_OUT_OF_REACH = 1e300


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


# The rank() methods whose key _table_key gives for a whole table.
_TABLE_RANKS = {LoadAware.rank, CacheLoadAware.rank, NetKV.rank}


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
