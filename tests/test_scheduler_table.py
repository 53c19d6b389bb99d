"""Ranking a table of candidates on arrays gives what scoring each candidate alone gives
(the scalar terms), to the bit: the same choice, the same cost, for every scheduler."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.model.loadgrid import CENSUS, KeyCensus, LoadGrid, load_key, seed_keys
from testbed.model.oracle import Oracle
from testbed.model.scheduler_base import OUT_OF_REACH, out_of_reach
from testbed.model.schedulers import (
    SCHEDULERS,
    Candidate,
    CandidateTable,
    RequestInfo,
    SchedulerContext,
    make_scheduler,
)
from testbed.model.timing import TimingModel
from testbed.serving import DecodeBoard

GB = 1e9


def scalar_key(sched, key: str, req: RequestInfo, cand: Candidate, oracle: Oracle):
    """Each scheduler's ranking key for one candidate, from the one-candidate terms."""
    if key == "la":
        return sched.load_time(cand)
    if key == "ca":
        return (-cand.hit_tokens, sched.load_time(cand))
    if key == "cla":
        return -sched.score(req, cand)
    if key == "flowkv":
        return (sched.network_time(req, "p", cand, oracle, use_inflight=False),
                sched.load_time(cand))
    return sched.cost(req, "p", cand, oracle)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 60),
       key=st.sampled_from([k for k in SCHEDULERS if k != "rr"]))
def test_table_ranking_equals_one_candidate_at_a_time(seed, n, key):
    rng = random.Random(seed)
    names = [f"d{i}" for i in range(n)]
    oracle = Oracle({("p", d): rng.choice([1, 2, 3]) for d in names},
                    {1: 100.0, 2: 50.0, 3: 25.0}, {1: 3.0, 2: 8.0, 3: 15.0},
                    {2: rng.uniform(0, 0.5), 3: rng.uniform(0, 0.9)})
    length = rng.randint(512, 65536)
    req = RequestInfo("r", length, length * 327680.0)
    # few distinct values, so exact ties (broken by the seeded draw) are common
    cands = [Candidate(d, rng.choice([1, 30, 80, 200]) * GB, rng.choice([0, 1, 5, 70]),
                       rng.choice([0, 10, 64]), rng.choice([0, 0, 512, length // 16 * 16]))
             for d in names]
    ctx = SchedulerContext(TimingModel(), memory_reserve_bytes=rng.choice([0.0, 2 * GB]),
                           seed=seed)
    by_table, alone = make_scheduler(key, ctx), make_scheduler(key, ctx)
    by_table.SMALL = 0  # arrays however few the candidates (a list takes the scalar path)
    for _ in range(rng.randint(0, 5)):  # some transfers in flight (self-contention)
        tier = rng.choice([1, 2, 3])
        by_table.inflight.increment(tier, "p")
        alone.inflight.increment(tier, "p")
    decision = by_table.select(req, "p", CandidateTable.of(cands), oracle)
    feasible = [c for c in cands
                if c.free_memory >= alone.effective_bytes(req, c) + ctx.memory_reserve_bytes]
    if not feasible:
        assert decision.rejected
        return
    keys = {c.instance: scalar_key(alone, key, req, c, oracle) for c in feasible}
    best = min(keys.values())
    assert keys[decision.decode] == best  # bitwise: the same floats
    tied = [c for c in feasible if keys[c.instance] == best]
    want = tied[0] if len(tied) == 1 else random.Random(seed).choice(tied)
    assert decision.decode == want.instance  # the seeded tie draw picks the same one
    if key in ("netkv-topo", "netkv-static", "netkv-full", "la"):
        assert decision.predicted_cost_s == best


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_a_cut_table_on_a_fabric_tier_map_ranks_as_one_candidate_at_a_time(seed):
    """The fat-tree's tier map on arrays, remembered for the whole set and taken by the
    rows of a cut (the feasible set of one request), gives every candidate its own tier."""
    from testbed.topologies.fattree import FatTreeSpec

    rng = random.Random(seed)
    spec = FatTreeSpec(pods=4)
    oracle = Oracle(spec.tier_map, spec.tier_bandwidth_gbps, spec.tier_latency_us,
                    {2: rng.uniform(0, 0.5), 3: rng.uniform(0, 0.9)})
    names = [d.name for d in spec.decode_pool]
    table = CandidateTable(names, [rng.choice([1, 30, 80]) * GB for _ in names],
                           [rng.choice([0, 1, 70]) for _ in names],
                           [rng.choice([0, 10, 64]) for _ in names],
                           [rng.choice([0, 0, 512]) for _ in names])
    req = RequestInfo("r", 8192, 8192 * 327680.0)
    ctx = SchedulerContext(TimingModel(), memory_reserve_bytes=2 * GB, seed=seed)
    by_table, alone = make_scheduler("netkv-full", ctx), make_scheduler("netkv-full", ctx)
    by_table.SMALL = 0
    for src in [p.name for p in spec.prefill_pool][:3]:  # rows remembered per prefill
        cut = by_table.feasible(req, table)
        assert len(cut) < len(table)  # a real cut: the 1 GB instances cannot hold it
        tiers, _ = by_table._tier_row(src, cut, oracle)
        assert tiers.tolist() == [oracle.tier(src, n) for n in cut.names]
        decision = by_table.select(req, src, table, oracle)
        keys = {c.instance: alone.cost(req, src, c, oracle) for c in cut}
        assert keys[decision.decode] == min(keys.values())
        by_table.transfer_done(src, decision.tier)


@settings(max_examples=24, deadline=None)
@given(seed=st.integers(0, 10**6), long_queues=st.booleans(),
       hits=st.sampled_from(["none", "one length", "two lengths", "few of one length",
                             "few of two lengths"]), in_runs=st.booleans())
def test_netkv_costs_of_a_large_table_are_the_one_candidate_costs_bitwise(seed, long_queues,
                                                                         hits, in_runs):
    """Thousands of candidates read their load from a (tier, excess, batch) grid; every
    cost is still the number the equations give one candidate (short queues: one grid
    lookup; long ones grow the grid past the table and take two; one cached-prefix
    length: costed once per tier; tiers in a few runs, as a fat-tree's rows come, read
    per run, with a few cached rows costed apart); D_r over the table or some of its
    rows is the one-candidate test (some rows fit only thanks to their hit), and a push
    puts every row outside it out of reach."""
    rng = random.Random(seed)
    names = [f"d{i}" for i in range(5000)]
    if in_runs:  # the prefill's rack, its pod, the rest: a handful of runs
        cuts = sorted(rng.sample(range(1, len(names)), rng.randint(1, 6)))
        bounds = zip([0, *cuts], [*cuts, len(names)], strict=True)
        tier_of = [1 + k % 3 for k, (lo, hi) in enumerate(bounds) for _ in range(lo, hi)]
    else:
        tier_of = [rng.choice([1, 2, 3]) for _ in names]
    oracle = Oracle({("p", d): t for d, t in zip(names, tier_of, strict=True)},
                    {1: 100.0, 2: 50.0, 3: 25.0}, {1: 3.0, 2: 8.0, 3: 15.0},
                    {2: rng.uniform(0, 0.5), 3: rng.uniform(0, 0.9)})
    length = rng.randint(512, 65536)
    req = RequestInfo("r", length, length * 327680.0)
    queues = [0, 1, 5, 12, 300] if long_queues else [0, 1, 5, 12]
    lengths = {"none": [0], "one length": [0, 0, 0, length // 32 * 16],
               "two lengths": [0, 0, 0, 512, length // 16 * 16],
               # as in runs: a handful of rows hold the prefix, each costed apart
               "few of one length": [0] * 199 + [length // 32 * 16],
               "few of two lengths": [0] * 198 + [512, length // 16 * 16]}[hits]
    reserve = 2 * GB  # memory near the request's own size: rows that fit only with a hit
    free = [30 * GB, 200 * GB, req.kv_bytes * 0.75 + reserve, req.kv_bytes * 0.3 + reserve]
    table = CandidateTable(names, [rng.choice(free) for _ in names],
                           [rng.choice(queues) for _ in names],
                           [rng.randint(0, 64) for _ in names],
                           [rng.choice(lengths) for _ in names])
    ctx = SchedulerContext(TimingModel(), seed=seed, memory_reserve_bytes=reserve)
    sched, alone = make_scheduler("netkv-full", ctx), make_scheduler("netkv-full", ctx)
    for _ in range(rng.randint(0, 5)):
        tier = rng.choice([1, 2, 3])
        sched.inflight.increment(tier, "p")
        alone.inflight.increment(tier, "p")
    sched._terms = {}  # as within one select()
    costs = sched._table_costs(req, "p", table, oracle)
    assert (sched._tier_runs("p", table, oracle) is not None) == in_runs
    one_by_one = [alone.cost(req, "p", c, oracle) for c in table]
    assert costs.tolist() == one_by_one
    # D_r over the whole table, and over any of its rows, as one candidate at a time
    fits = [bool(alone.feasible(req, [c])) for c in table]
    assert 0 < sum(fits) < len(fits)
    assert sched._fits(req, table).tolist() == fits
    some = np.array(sorted(rng.sample(range(len(names)), 300)), dtype=np.int64)
    assert sched._fits_rows(req, table, some).tolist() == [fits[i] for i in some.tolist()]
    pushed = out_of_reach(costs.copy(), np.logical_not(sched._fits(req, table)))
    assert all(p >= OUT_OF_REACH for p, ok in zip(pushed.tolist(), fits, strict=True)
               if not ok)
    # the load keys a board keeps (an engine's table carries them) give the same costs
    kept = CandidateTable(names, table.free_memory, table.queued, table.batch,
                          table.hit_tokens)
    seed_keys(kept, board_keys(table, ctx.beta_max), ctx.beta_max)
    assert sched._table_costs(req, "p", kept, oracle).tolist() == one_by_one
    # a batch outside [0, beta_max] is left to the equations (and their checks)
    odd = CandidateTable(names[:40], [30 * GB] * 40, [0] * 40, [65] + [1] * 39, [0] * 40)
    seed_keys(odd, board_keys(odd, ctx.beta_max), ctx.beta_max)  # no keys for it
    assert sched._table_costs(req, "p", odd, oracle) is None
    sched._terms = None


def board_keys(table: CandidateTable, beta_max: int) -> np.ndarray:
    return np.array([load_key(q, b, beta_max) for q, b in
                     zip(table.queued.tolist(), table.batch.tolist(), strict=True)])


@settings(max_examples=30, deadline=None)
@given(queued=st.lists(st.integers(0, 400), min_size=1, max_size=50),
       batch=st.lists(st.integers(-2, 70), min_size=50, max_size=50))
def test_a_boards_load_key_is_the_grids_key(queued, batch):
    """load_key, kept per instance as it publishes, is the key LoadGrid finds for its row
    (-1 where the batch is outside [0, beta_max], and then no table is given keys)."""
    batch = batch[:len(queued)]
    table = CandidateTable([f"d{i}" for i in range(len(queued))], [1.0] * len(queued),
                           queued, batch, [0] * len(queued))
    grid = LoadGrid(lambda loads: np.zeros(np.shape(loads.batch)), 64)
    keys = board_keys(table, 64)
    found = grid.keys(table)
    if found is None:
        assert (keys < 0).any()
    else:
        assert keys.tolist() == found.tolist()
        kept = CandidateTable(table.names, [1.0] * len(queued), queued, batch,
                              [0] * len(queued))
        seed_keys(kept, keys, 64)
        assert grid.keys(kept).tolist() == found.tolist()


def test_a_decode_board_keeps_each_instances_load_key_as_it_publishes():
    board = DecodeBoard(beta_max=8)
    slots = [board.slot() for _ in range(3)]
    for slot, (queued, batch) in zip(slots, [(0, 0), (5, 8), (20, 3)], strict=True):
        board.publish(slot, 1e9, queued, batch)
    assert board.load_key.tolist() == [0, 5 * 9 + 8, 15 * 9 + 3]
    board.publish(slots[1], 1e9, 0, 2)  # drained: its key follows
    assert board.load_key[slots[1]] == 2


def test_a_census_counts_the_rows_at_each_key_as_they_move():
    census = KeyCensus()
    rows = [census.add() for _ in range(4)]
    assert rows == [0, 1, 2, 3] and census.count == [4] and census.lowest({}) == 0
    version = census.version
    census.move(1, 5)
    census.move(2, 5)
    census.move(3, 5)
    census.move(3, 5)  # no change: no new version
    assert census.version == version + 3
    assert census.count[5] == 3 and census.rows[5] == {1, 2, 3}
    assert census.lowest({0: 1}) == 5  # row 0 skipped: the next key held
    assert census.lowest({0: 1, 5: 3}) is None
    census.move(0, 7)
    assert census.lowest({}) == 5 and census.lowest({5: 3}) == 7
    census.move(2, -1)  # a batch outside [0, beta_max]
    assert census.keyless == 1 and census.rows[5] == {1, 3}
    census.move(2, 2)
    assert census.keyless == 0 and census.lowest({}) == 2


def test_a_decode_board_keeps_the_census_of_its_load_keys_once_a_table_is_large():
    board = DecodeBoard(beta_max=8)
    n = DecodeBoard.CENSUS_FROM
    names = tuple(f"d{i}" for i in range(n))
    index = {name: i for i, name in enumerate(names)}
    none = np.zeros(0, dtype=np.int64)
    for _ in range(n):
        board.slot()
    board.publish(1, 1e9, 5, 8)
    small = board.table(names[:-1], slice(0, n - 1), np.zeros(n - 1), index, none)
    assert board.census is None and CENSUS not in small.memo  # not every instance
    table = board.table(names, slice(0, n), np.zeros(n), index, none)
    assert table.memo[CENSUS] == (board.census, board.census.version)
    board.publish(2, 1e9, 20, 3)  # kept from then on
    board.slot()
    assert board.census.keys == board.load_key.tolist()
    assert sorted(r for rows in board.census.rows for r in rows) == list(range(n + 1))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), key=st.sampled_from(["netkv-full", "netkv-static",
                                                         "netkv-topo"]),
       busy=st.sampled_from(["idle", "some ties", "few ties", "long queues"]),
       hits=st.sampled_from([0, 1, 5, 80]), tight=st.booleans())
def test_netkv_picks_by_tiers_from_a_census_as_the_table_pass(seed, key, busy, hits, tight):
    """With its board's census a table is picked from without a pass over its rows:
    decision after decision (in-flight counts moving, the seeded draws included) the
    same instance at the same cost as the table pass, over a fat-tree's tier map, with
    many or few rows tied at the least load, long queues (where a later load key costs
    less: the table pass then decides), rows with a cached prefix, rows without room;
    and the pick by tiers does decide most of them."""
    from testbed.topologies.fattree import FatTreeSpec

    rng = random.Random(seed)
    spec = FatTreeSpec(pods=16)
    oracle = Oracle(spec.tier_map, spec.tier_bandwidth_gbps, spec.tier_latency_us,
                    {2: rng.uniform(0, 0.5), 3: rng.uniform(0, 0.9)})
    names = tuple(d.name for d in spec.decode_pool)
    prefills = [p.name for p in spec.prefill_pool]
    ctx = SchedulerContext(TimingModel(), memory_reserve_bytes=2 * GB, seed=seed)
    board = DecodeBoard(ctx.beta_max)
    for _ in names:
        board.slot()
    by_tiers, by_pass = make_scheduler(key, ctx), make_scheduler(key, ctx)
    index = {n: i for i, n in enumerate(names)}
    taken = 0
    # (queued, batch) pairs; the long queues' lowest key (excess 9, a full batch) has a
    # load above the next key's (excess 10, an empty batch)
    pairs = {"idle": [(0, 0)] * 6 + [(1, 3)],
             "some ties": [(q, b) for q in (0, 3) for b in (0, 16, 40, 64)],
             "few ties": [(q, b) for q in range(9) for b in range(65)],
             "long queues": [(9, 64), (74, 0), (140, 30), (200, 64)]}[busy]
    for step in range(30):
        length = rng.randint(512, 65536)
        req = RequestInfo("r", length, length * 327680.0)
        # room near the request's own size: rows that fit only thanks to their hit
        rooms = [GB, 200 * GB, 200 * GB, req.kv_bytes * 0.75 + 2 * GB] if tight \
            else [200 * GB]
        publish = len(names) if step == 0 else len(names) // 4  # all, then some
        for slot in rng.sample(range(len(names)), publish):
            board.publish(slot, rng.choice(rooms), *rng.choice(pairs))
        hit = np.zeros(len(names), dtype=np.int64)
        rows = sorted(rng.sample(range(len(names)), hits))
        hit[rows] = [rng.choice([512, length // 2, length // 16 * 16]) for _ in rows]

        def table(census, hit=hit, rows=rows):
            if census:  # as the simulator hands it over
                return board.table(names, slice(0, len(names)), hit.copy(), index,
                                   np.array(rows, dtype=np.int64))
            t = CandidateTable(names, board.free_memory.copy(), board.queued.copy(),
                               board.batch.copy(), hit.copy(), index=index,
                               hit_rows=np.array(rows, dtype=np.int64))
            seed_keys(t, board.load_key.copy(), ctx.beta_max)
            return t

        src = rng.choice(prefills)
        with_census = table(True)
        by_tiers._terms = {}
        taken += by_tiers._pick_by_tiers(req, src, with_census, oracle,
                                         *with_census.memo[CENSUS]) is not None
        by_tiers._terms = None
        by_tiers._rng.setstate(by_pass._rng.getstate())  # the look above drew nothing
        a = by_tiers.select(req, src, with_census, oracle)
        b = by_pass.select(req, src, table(False), oracle)
        assert repr(a) == repr(b)
        assert by_tiers._rng.getstate() == by_pass._rng.getstate()
        if not a.rejected and rng.random() < 0.7:
            by_tiers.transfer_done(src, a.tier)
            by_pass.transfer_done(src, b.tier)
    if busy in ("some ties", "few ties") and hits <= 5 and not tight:
        assert taken >= 25
    if busy == "long queues":
        assert taken < 30


def test_a_census_behind_its_table_is_not_read():
    """A table is a snapshot: once a row publishes after it was made, its census is not
    read for it (the table pass decides)."""
    from testbed.topologies.fattree import FatTreeSpec

    spec = FatTreeSpec(pods=16)
    oracle = Oracle(spec.tier_map, spec.tier_bandwidth_gbps, spec.tier_latency_us)
    names = tuple(d.name for d in spec.decode_pool)
    board = DecodeBoard(64)
    for i, _ in enumerate(names):
        board.slot()
        board.publish(i, 200 * GB, 0, 1 + i % 7)
    table = board.table(names, slice(0, len(names)), np.zeros(len(names), dtype=np.int64),
                        {n: i for i, n in enumerate(names)}, np.zeros(0, dtype=np.int64))
    sched = make_scheduler("netkv-full", SchedulerContext(TimingModel()))
    req = RequestInfo("r", 4096, 4096 * 327680.0)
    src = spec.prefill_pool[0].name
    sched._terms = {}
    assert sched._pick_by_tiers(req, src, table, oracle, *table.memo[CENSUS]) is not None
    board.publish(3, 200 * GB, 0, 0)
    assert sched._pick_by_tiers(req, src, table, oracle, *table.memo[CENSUS]) is None
    sched._terms = None


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), key=st.sampled_from(["netkv-full", "cla", "la"]))
def test_a_whole_table_pick_is_feasible_then_rank(seed, key):
    """Over a whole table NetKV, CLA* and LA key every row and push the infeasible out of
    reach instead of cutting the table: decision after decision (the seeded tie draws
    included) they pick what the cut-then-rank path picks, at the same cost, and reject
    where it does."""
    rng = random.Random(seed)
    names = [f"d{i}" for i in range(3000)]
    oracle = Oracle({("p", d): rng.choice([1, 2, 3]) for d in names},
                    {1: 100.0, 2: 50.0, 3: 25.0}, {1: 3.0, 2: 8.0, 3: 15.0},
                    {2: rng.uniform(0, 0.5), 3: rng.uniform(0, 0.9)})
    ctx = SchedulerContext(TimingModel(), memory_reserve_bytes=2 * GB, seed=seed)
    whole, cut = make_scheduler(key, ctx), make_scheduler(key, ctx)
    cut._pick_on_table = lambda *_: None  # always the general path
    for _ in range(25):
        length = rng.randint(512, 65536)
        req = RequestInfo("r", length, length * 327680.0)
        roomy = rng.choice([200, 200, 1])  # a third of the tables: nothing fits
        table = CandidateTable(names, [rng.choice([1, 30, roomy]) * GB for _ in names],
                               [rng.choice([0, 1, 70]) for _ in names],
                               [rng.choice([0, 64]) for _ in names],
                               [rng.choice([0] * 8 + [length // 4, length // 2, length // 16 * 16])
                                for _ in names])
        a, b = whole.select(req, "p", table, oracle), cut.select(req, "p", table, oracle)
        assert repr(a) == repr(b)  # -0.0 is not 0.0 here (CLA*'s cost of a full instance)
        if not a.rejected:
            whole.transfer_done("p", a.tier)
            cut.transfer_done("p", b.tier)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 31),
       key=st.sampled_from(["la", "cla", "netkv-topo", "netkv-static", "netkv-full"]))
def test_a_small_table_is_picked_from_its_columns_as_the_list_path(seed, n, key):
    """Below SMALL rows a table is ranked on its columns as lists, no candidate built
    but the chosen: decision after decision (in-flight counts moving, the seeded draws
    included, some tables with nothing feasible, batches out of range) the same decision
    as the list of candidates gives, to the repr."""
    rng = random.Random(seed)
    names = tuple(f"d{i}" for i in range(n))
    oracle = Oracle({("p", d): rng.choice([1, 2, 3]) for d in names},
                    {1: 100.0, 2: 50.0, 3: 25.0}, {1: 3.0, 2: 8.0, 3: 15.0},
                    {2: rng.uniform(0, 0.5), 3: rng.uniform(0, 0.9)})
    ctx = SchedulerContext(TimingModel(), memory_reserve_bytes=2 * GB, seed=seed)
    few, listed = make_scheduler(key, ctx), make_scheduler(key, ctx)
    board = DecodeBoard(ctx.beta_max)
    index = {d: i for i, d in enumerate(names)}
    for _ in names:
        board.slot()
    for _ in range(20):
        length = rng.randint(512, 65536)
        req = RequestInfo("r", length, length * 327680.0)
        roomy = rng.choice([200, 200, 1]) * GB  # a third of the tables: nothing fits
        near = req.kv_bytes * 0.75 + 2 * GB  # rows that fit only thanks to their hit
        for slot in range(n):
            board.publish(slot, rng.choice([GB, near, roomy]), rng.choice([0, 1, 5, 70]),
                          rng.choice([0, 10, 64, 64, 65 if rng.random() < 0.02 else 0]))
        hit = np.array([rng.choice([0] * 6 + [512, length // 16 * 16]) for _ in names],
                       dtype=np.int64)
        table = board.table(names, slice(0, n), hit, index, np.flatnonzero(hit))
        a = few.select(req, "p", table, oracle)
        b = listed.select(req, "p", list(table), oracle)
        assert repr(a) == repr(b)
        if not a.rejected:
            few.transfer_done("p", a.tier)
            listed.transfer_done("p", b.tier)


def test_a_netkv_subclass_with_its_own_cost_is_ranked_by_it_over_any_table():
    """NetKV's passes over a table compute its cost their own way: a subclass that
    costs differently (here: the most free memory wins) is asked through its cost."""
    from testbed.model.schedulers import NetKV

    class Roomiest(NetKV):
        def cost(self, request, prefill, cand, oracle):
            return -cand.free_memory

    ctx = SchedulerContext(TimingModel())
    req = RequestInfo("r", 4096, 4096 * 327680.0)
    for n in (8, 100):
        names = [f"d{i}" for i in range(n)]
        oracle = Oracle({("p", d): 2 for d in names}, {2: 50.0}, {2: 8.0})
        table = CandidateTable(names, [(10 + i) * GB for i in range(n)], [0] * n,
                               [0] * n, [0] * n)
        sched = Roomiest(ctx, use_inflight=True, use_congestion=True, name="roomiest")
        assert not sched._by_whole_table()
        assert sched.select(req, "p", table, oracle).decode == names[-1]


def test_a_subclass_that_ranks_its_own_way_is_asked_even_over_a_whole_table():
    """A plugin that subclasses CLA* and overrides rank() (or feasible()) is not bypassed
    by CLA*'s whole-table key."""
    from testbed.model.schedulers import CacheLoadAware

    class Last(CacheLoadAware):
        def rank(self, request, prefill, feasible, oracle):
            return feasible[len(feasible) - 1], 0.0

    class Nowhere(CacheLoadAware):
        def feasible(self, request, candidates):
            return []

    names = [f"d{i}" for i in range(100)]
    oracle = Oracle({("p", d): 2 for d in names}, {2: 50.0}, {2: 8.0})
    table = CandidateTable(names, [200 * GB] * 100, [0] * 100, [0] * 100, [0] * 100)
    req = RequestInfo("r", 4096, 4096 * 327680.0)
    ctx = SchedulerContext(TimingModel())
    assert Last(ctx).select(req, "p", table, oracle).decode == "d99"
    assert Nowhere(ctx).select(req, "p", table, oracle).rejected
    assert CacheLoadAware(ctx)._by_whole_table() and not Last(ctx)._by_whole_table()


def test_a_row_the_equations_refuse_matters_only_if_it_is_feasible():
    """LA's load term refuses a negative batch; over a whole table an infeasible row with
    one leaves the decision to the feasible rows, as a cut of the table would."""
    names = [f"d{i}" for i in range(100)]
    oracle = Oracle({("p", d): 2 for d in names}, {2: 50.0}, {2: 8.0})
    table = CandidateTable(names, [1 * GB] + [200 * GB] * 99, [0] * 100, [-1] + [5] * 99,
                           [0] * 100)
    req = RequestInfo("r", 4096, 4096 * 327680.0)
    la = make_scheduler("la", SchedulerContext(TimingModel()))
    assert la.select(req, "p", table, oracle).decode != "d0"


@pytest.mark.parametrize("weights", [(1.0, 1.0), (1.5, 0.7), (0.0, 2.0), (0.3, 0.0)])
def test_cla_keys_a_table_by_lookup_exactly_as_its_score(weights):
    """CLA*'s whole-table key reads the uncached rows from a table by q_d + beta_d and
    scores the cached ones in full: the same numbers as -score, signs of zero included,
    with busy instances past beta_max and any weights."""

    from testbed.model.schedulers import CacheLoadAware

    sched = CacheLoadAware(SchedulerContext(TimingModel(), beta_max=64), *weights)
    for seed in range(10):
        rng = random.Random(seed)
        n = 500
        table = CandidateTable([f"d{i}" for i in range(n)], [200 * GB] * n,
                               [rng.choice([0, 1, 5, 70]) for _ in range(n)],
                               [rng.randint(0, 64) for _ in range(n)],
                               [rng.choice([0] * 5 + [100, 4096, 999]) for _ in range(n)])
        req = RequestInfo("r", rng.randint(4096, 70000), 1e9)
        key = sched._table_key(req, "p", table, None)
        want = -sched.score(req, table)
        assert np.array_equal(key, want) and np.array_equal(np.signbit(key), np.signbit(want))


def test_a_subclass_with_its_own_score_is_scored_by_it_over_a_whole_table():
    """CLA*'s lookup holds for its own score only: a plugin that scores by something
    else (here free memory) gets its own numbers over a whole table."""
    from testbed.model.schedulers import CacheLoadAware

    class Roomiest(CacheLoadAware):
        def score(self, request, cand):
            return cand.free_memory / GB

    names = [f"d{i}" for i in range(100)]
    oracle = Oracle({("p", d): 2 for d in names}, {2: 50.0}, {2: 8.0})
    table = CandidateTable(names, [(10 + i) * GB for i in range(100)], [0] * 100,
                           [0] * 100, [0] * 100)
    req = RequestInfo("r", 4096, 4096 * 327680.0)
    assert Roomiest(SchedulerContext(TimingModel())).select(req, "p", table, oracle).decode \
        == "d99"


@pytest.mark.parametrize("key", ["netkv-full", "cla", "la"])
@pytest.mark.parametrize("lowest", ["all fit", "some fit", "none fit"])
def test_the_lowest_rows_are_asked_for_room_first(key, lowest):
    """Over a whole table D_r is asked first of the rows tied at the lowest key: where
    all, some or none of them have the memory, the pick (and its seeded draw) is the
    cut-then-rank path's."""
    n = 400
    names = [f"d{i}" for i in range(n)]
    oracle = Oracle({("p", d): 2 for d in names}, {2: 50.0}, {2: 8.0})
    idle = list(range(0, n, 7))  # the lowest key: nothing queued, nothing running
    room = {"all fit": idle, "some fit": idle[::2], "none fit": []}[lowest]
    free = [200 * GB if i in room or i not in idle else 1 * GB for i in range(n)]
    busy = [0 if i in idle else 1 + i % 30 for i in range(n)]
    table = CandidateTable(names, free, busy, busy, [0] * n)
    req = RequestInfo("r", 4096, 4096 * 327680.0)
    for seed in range(5):
        ctx = SchedulerContext(TimingModel(), memory_reserve_bytes=2 * GB, seed=seed)
        whole, cut = make_scheduler(key, ctx), make_scheduler(key, ctx)
        cut._pick_on_table = lambda *_: None
        a, b = whole.select(req, "p", table, oracle), cut.select(req, "p", table, oracle)
        assert repr(a) == repr(b)
        assert (int(a.decode[1:]) in room) == (lowest != "none fit")
