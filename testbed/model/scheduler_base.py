"""What every decode-instance scheduler shares (model/schedulers.py has them): the
request and decision records, Algorithm 1's memory-feasibility filter, the cost terms one
candidate or a table of them at a time, the seeded tie draw, the in-flight counter behind
the transfer-done callback, and the one-pass pick over a whole table of candidates."""

from __future__ import annotations

import functools
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
    fault: str = ""  # why the scheduler's own choice was replaced (model/extensions/guard.py)

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
        self._tier_rows: dict[tuple[str, int], tuple[tuple, object, np.ndarray, list, dict]] = {}
        self._terms: dict | None = None  # a tier's B_eff and latency, during one select()
        self._loads = LoadGrid(self.load_time, ctx.beta_max)  # load_time by (excess, batch)

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
        # drawn from as an array, not a list: thousands of rows may tie
        chosen = int(tied[0] if len(tied) == 1 else self._rng.choice(tied))
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

    def _tier_row(self, prefill: str, table: CandidateTable, oracle: Oracle,
                  stride: int = 1) -> tuple[np.ndarray, list[int]]:
        """The oracle's tier from `prefill` to each candidate of `table` (times `stride`:
        a row offset into a per-tier grid), and the tiers of the whole set it was cut
        from (a superset of the table's), remembered per tier map for that set (an engine
        passes the same names while its candidate set does not change)."""
        root, rows = table.root()
        hit = self._tier_entry(prefill, root, oracle)
        scaled = hit[2]
        if stride != 1:
            scaled = hit[4].get(stride)
            if scaled is None:
                scaled = hit[4][stride] = hit[2].astype(_smallest(hit[3][-1] * stride)) * stride
        return (scaled if rows is None else scaled[rows]), hit[3]

    def _tier_runs(self, prefill: str, root: CandidateTable, oracle: Oracle
                   ) -> list[tuple[int, int, int]] | None:
        """The tier row from `prefill` over a whole table as runs of one tier, (start,
        stop, tier), or None if it has more than MAX_RUNS: names follow the topology, so
        in a fat-tree a prefill sees its rack, its pod and the rest as a few runs, and a
        per-tier term is laid on a slice instead of gathered per row."""
        _, _, row, _, extra = self._tier_entry(prefill, root, oracle)
        if "runs" not in extra:
            starts = [0, *(np.flatnonzero(np.diff(row)) + 1).tolist()]
            extra["runs"] = None if len(starts) > self.MAX_RUNS else [
                (lo, hi, int(row[lo])) for lo, hi in zip(starts, [*starts[1:], len(row)],
                                                         strict=True)]
        return extra["runs"]

    MAX_RUNS = 16

    def _tier_entry(self, prefill: str, root: CandidateTable, oracle: Oracle) -> tuple:
        """(names, tier map, tier row, tiers present, what is derived from the row),
        remembered per prefill and candidate set (see _tier_row)."""
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
            # kept per prefill (thousands at the largest fabrics): in the fewest bytes
            row = row.astype(_smallest(present[-1]))
            hit = self._tier_rows[key] = (names, oracle.tier_map, row, present, {})
        return hit

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

    def _fits_rows(self, request: RequestInfo, table: CandidateTable, rows: np.ndarray
                   ) -> np.ndarray:
        """Which of `rows` of a whole table are in D_r (a mask over them), as _fits."""
        return table.free_memory[rows] >= effective_transfer_bytes(
            request.kv_bytes, table.hit_tokens[rows], request.input_len) \
            + self.ctx.memory_reserve_bytes

    def _fits_row(self, request: RequestInfo, table: CandidateTable, row: int) -> bool:
        """Whether one row of a whole table is in D_r, as _fits (asked as one candidate:
        most often one row is lowest)."""
        return bool(table.free_memory[row] >= effective_transfer_bytes(
            request.kv_bytes, int(table.hit_tokens[row]), request.input_len)
            + self.ctx.memory_reserve_bytes)

    # -- the interface -------------------------------------------------------------
    def select(
        self, request: RequestInfo, prefill: str,
        candidates: Sequence[Candidate] | CandidateTable, oracle: Oracle
    ) -> Decision:
        self._terms = {}  # one request, prefill, oracle, in-flight count until the end
        try:
            if isinstance(candidates, CandidateTable) and candidates.base is None \
                    and self._by_whole_table():
                picked = self._pick_on_table(request, prefill, candidates, oracle) \
                    if len(candidates) >= self.SMALL \
                    else pick_few(self, request, prefill, candidates, oracle)
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
        return _ranks_by_table_key(type(self))

    def _pick_on_table(self, request: RequestInfo, prefill: str, table: CandidateTable,
                       oracle: Oracle) -> tuple[Candidate, float] | None:
        """feasible() then rank() in fewer passes, with the same result and the same
        draws: every row keyed, no cut made. D_r is asked first only of the rows tied at
        the lowest key (if any of them is in D_r, the feasible minimum is theirs); only
        if none is are the rows outside D_r pushed out of reach and the minimum taken
        again. The tied rows come in table order as a cut's would, so the seeded draw picks
        the same one. None where that shortcut does not hold (nothing feasible below the
        push, a key that is not a number, an equation refusing a row that may not be
        feasible): the general path decides and speaks."""
        try:
            key = self._table_key(request, prefill, table, oracle)
            if key is None:
                return None
            if np.shape(key) != (len(table),):  # a number for every row
                key = np.broadcast_to(key, (len(table),))
            first = key.argmin()
            rows = _NO_ROWS
            if key[first] < OUT_OF_REACH:
                tied = key == key[first]
                if np.count_nonzero(tied) == 1:
                    if self._fits_row(request, table, int(first)):
                        rows = first.reshape(1)
                else:
                    rows = np.flatnonzero(tied)
                    fits = self._fits_rows(request, table, rows)
                    if not fits.all():
                        rows = rows[fits]
            if not len(rows):  # the lowest are all outside D_r: push every such row
                pushed = out_of_reach(key.copy(), np.logical_not(self._fits(request, table)))
                low = pushed.min()
                if not low < OUT_OF_REACH:
                    return None
                rows = np.flatnonzero(pushed == low)
        except ValueError:  # the cut-then-rank path checks only the feasible rows
            return None
        # drawn from as an array: thousands of rows may tie
        return table[int(rows[0] if len(rows) == 1 else self._rng.choice(rows))], \
            float(key[rows[0]])

    def _few_keys(self, request: RequestInfo, prefill: str, table: CandidateTable,
                  oracle: Oracle, rows: list[int], hit: list[int]) -> list[float] | None:
        """rank()'s one-candidate key for `rows` of a small table (`hit`: its hits)."""

    # Terms _table_key/_few_keys recompute: a subclass overriding one goes through rank().
    MIRRORS: tuple[str, ...] = ()

    def _table_key(self, request: RequestInfo, prefill: str, table: CandidateTable,
                   oracle: Oracle) -> np.ndarray | None:
        """rank()'s key for every row of a whole table, D_r aside (the key is also the
        cost reported); None if this scheduler has no one-column key."""
        return None

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


_NO_ROWS = np.zeros(0, dtype=np.int64)


def _smallest(top: int) -> type:
    """The smallest signed integer type holding 0..top."""
    return next(t for t in (np.int8, np.int16, np.int32) if top <= np.iinfo(t).max) \
        if top <= np.iinfo(np.int32).max else np.int64


@functools.cache
def _ranks_by_table_key(cls: type) -> bool:
    """Scheduler._by_whole_table for a class (asked at every decision: found once)."""
    owner = next(c for c in cls.__mro__ if "_table_key" in vars(c))
    return owner is not Scheduler and vars(owner).get("rank") is cls.rank \
        and cls.feasible is Scheduler.feasible \
        and all(getattr(cls, name) is getattr(owner, name) for name in owner.MIRRORS)

# What an infeasible row's cost becomes in one table pass: no feasible cost comes near
# it, and anything at or above it goes the general way.
OUT_OF_REACH = 1e300


def out_of_reach(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`values` with the rows of the mask `rows` set to OUT_OF_REACH, in place; the value
    an add of it gives any finite cost. Written by index, not through the mask: a random
    boolean mask writes slowly (12,288 rows: 35-38 us at half of them, against 6 us by
    index at 3%), and most tables have every row in D_r (2 us then, for the test)."""
    at = np.flatnonzero(rows)
    if len(at):
        values[at] = OUT_OF_REACH
    return values


def pick_few(sched: Scheduler, request: RequestInfo, prefill: str, table: CandidateTable,
             oracle: Oracle) -> tuple[Candidate, float] | None:
    """`sched`'s feasible() then rank() over a table of fewer than SMALL rows, on its columns
    as Python lists and with no candidate built but the chosen: D_r as the list
    path tests it, each feasible row keyed by `_few_keys` (the numbers the list
    path's key gives), the least, the tied rows in table order, the same draw. None
    where this scheduler has no such keys, or nothing is feasible (the list path
    then decides and says why)."""
    free, hit = table.free_memory.tolist(), table.hit_tokens.tolist()
    kv, length = request.kv_bytes, request.input_len
    reserve = sched.ctx.memory_reserve_bytes
    whole = effective_transfer_bytes(kv, 0, length) + reserve
    try:
        rows = [i for i, (room, tokens) in enumerate(zip(free, hit, strict=True))
                if room >= (effective_transfer_bytes(kv, tokens, length) + reserve
                            if tokens else whole)]
        keys = sched._few_keys(request, prefill, table, oracle, rows, hit) if rows \
            else None
    except ValueError:  # the list path checks only the feasible rows, and speaks
        return None
    if keys is None:
        return None
    best = min(keys)
    tied = [row for row, key in zip(rows, keys, strict=True) if key == best]
    return table[tied[0] if len(tied) == 1 else sched._rng.choice(tied)], best
