"""Prefix cache: block mapping, LCP, LRU order, pinning, memory."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.model.cache import PrefixCache, block_keys, full_block_count


def test_mooncake_ids_map_to_16_token_sub_blocks():
    keys = block_keys([7, 9], input_len=512 + 40, block_tokens=16)
    assert len(keys) == 32 + 2  # 40 tokens of the second id = 2 full 16-token blocks
    assert keys[:2] == [7 * 32, 7 * 32 + 1] and keys[32:] == [9 * 32, 9 * 32 + 1]
    assert block_keys([7, 9], 512 + 40, 512) == [7]  # the partial 512-block is not cached
    assert full_block_count(1000, 16) == 62


def test_block_size_must_divide_512_and_ids_must_cover_input():
    with pytest.raises(ValueError, match="divide"):
        block_keys([1], 100, 48)
    with pytest.raises(ValueError, match="cover"):
        block_keys([1], 1024, 16)


def test_lcp_stops_at_first_missing_block():
    cache = PrefixCache(16, block_bytes=1.0)
    hashes = [3, 4, 5]
    cache.pin(hashes, 40)  # all of id 3, 8 sub-blocks of id 4
    assert cache.prefix_hit_blocks(hashes, 3 * 512) == 40
    assert cache.prefix_hit_tokens(hashes, 3 * 512) == 640
    # a different first id shares nothing even if later ids match
    assert cache.prefix_hit_blocks([99, 4, 5], 3 * 512) == 0
    # a shorter request is capped at its own full blocks
    assert cache.prefix_hit_blocks(hashes, 100) == 6


def naive_lcp(present: set[int], keys: list[int]) -> int:
    n = 0
    for k in keys:
        if k not in present:
            break
        n += 1
    return n


def test_fast_lcp_agrees_with_a_naive_walk_under_random_churn():
    rng = random.Random(4)
    cache = PrefixCache(16, block_bytes=1.0)
    requests = []
    for _ in range(60):
        ids = [rng.randrange(8) for _ in range(rng.randrange(1, 4))]
        length = rng.randrange(1, len(ids) * 512 + 1)
        requests.append((ids, length))
    for _ in range(400):
        ids, length = rng.choice(requests)
        keys = block_keys(ids, length, 16)
        present = {k for k in keys if k in cache}
        assert cache.prefix_hit_blocks(ids, length) == naive_lcp(present, keys)
        if rng.random() < 0.5:
            cache.pin(ids, len(keys))
            cache.unpin(ids, len(keys))
        cache.evict_to(rng.randrange(0, 200))
    assert len(cache) <= 400


def test_lru_evicts_tails_first_and_never_pinned_blocks():
    cache = PrefixCache(512, block_bytes=10.0)
    cache.pin([1, 2, 3], 3)
    cache.unpin([1, 2, 3], 3)  # released tail first: 3 is least recent
    cache.pin([9], 1)  # pinned by a live request
    assert cache.bytes_used == 40 and cache.pinned_bytes == 10 and cache.evictable_bytes == 30
    assert cache.evict_to(30) == 1
    assert 3 not in cache and 1 in cache and 2 in cache
    assert cache.prefix_hit_blocks([1, 2, 3], 3 * 512) == 2
    assert cache.evict_to(0) == 2
    assert 9 in cache and cache.bytes_used == 10  # the pinned block survives


def test_touching_a_cached_prefix_makes_it_recent():
    cache = PrefixCache(512, block_bytes=1.0)
    cache.pin([1], 1); cache.unpin([1], 1)  # noqa: E702
    cache.pin([2], 1); cache.unpin([2], 1)  # noqa: E702
    cache.pin([1], 1); cache.unpin([1], 1)  # 1 reused: now 2 is the oldest  # noqa: E702
    cache.evict_to(1)
    assert 1 in cache and 2 not in cache


def test_refcounted_pins_and_unpin_errors():
    cache = PrefixCache(512, block_bytes=1.0)
    cache.pin([5], 1); cache.pin([5], 1)  # noqa: E702
    cache.unpin([5], 1)
    assert cache.evict_to(0) == 0 and 5 in cache
    cache.unpin([5], 1)
    assert cache.evict_to(0) == 1
    with pytest.raises(KeyError, match="trace id 5"):
        cache.unpin([5], 1)
    with pytest.raises(ValueError, match="cannot hold"):
        cache.pin([5], 2)  # one id covers one 512-token block


def random_prompts(rng: random.Random, n: int = 10) -> list[tuple[list[int], int]]:
    """(trace ids, input length) of requests that share prefixes: ids from five families,
    now and then one id twice in a request."""
    prompts = []
    for _ in range(n):
        ids = [rng.randrange(5) * 100 + j for j in range(rng.randrange(1, 7))]
        if rng.random() < 0.1:
            ids.append(ids[0])  # the same id twice in one request
        prompts.append((ids, rng.randrange(1, 512 * len(ids) + 1)))
    return prompts


def _lru_keys(cache: PrefixCache) -> list[int]:
    """The run-based LRU spelled out block by block, oldest first."""
    return [run[0] * cache.ratio + j for run in cache._lru.values()
            for j in range(run[2] - 1, run[1] - 1, -1)]


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**6), block_tokens=st.sampled_from([16, 64, 512]))
def test_runs_per_trace_id_keep_the_state_a_block_by_block_cache_keeps(seed, block_tokens):
    """Requests as the decode instances drive them (hold the hit, then all blocks when
    the KV lands; release on cancel or completion), with shared prefixes, an id twice in
    one request and evictions at random budgets: the cached blocks, pins, LRU order,
    evictions, journal, holder index and prefix hits equal the reference's."""
    from testbed.model.cache import HolderIndex
    from tests.reference_cache import KeyCache

    rng = random.Random(seed)
    index = HolderIndex()
    runs = PrefixCache(block_tokens, 1.0, index, "d")
    runs.record_changes()
    ref = KeyCache(block_tokens, 1.0)
    prompts = random_prompts(rng)
    live: list[tuple[list[int], list[int], int]] = []  # (ids, keys, blocks held)
    for _ in range(80):
        op = rng.random()
        if op < 0.35:  # assigned: holds its hit
            ids, length = rng.choice(prompts)
            keys = block_keys(ids, length, block_tokens)
            hit = min(len(keys), runs.prefix_hit_blocks(ids, length) + rng.randrange(0, 3))
            runs.pin(ids, hit)
            ref.pin(keys[:hit])
            live.append((ids, keys, hit))
        elif op < 0.55 and live:  # its KV landed: holds every block
            k = rng.randrange(len(live))
            ids, keys, held = live[k]
            runs.pin(ids, len(keys), held)
            ref.pin(keys[held:])
            live[k] = (ids, keys, len(keys))
        elif op < 0.8 and live:  # completed or cancelled: releases what it holds
            ids, keys, held = live.pop(rng.randrange(len(live)))
            runs.unpin(ids, held)
            ref.unpin(keys[:held])
        else:
            budget = rng.randrange(0, 40 * 512 // block_tokens)
            assert runs.evict_to(budget) == ref.evict_to(budget)
        assert len(runs) == len(ref) and runs.pinned_bytes == len(ref.pinned)
        assert _lru_keys(runs) == list(ref.lru)
        assert sorted(runs.keys()) == sorted([*ref.pinned, *ref.lru])
        assert runs.journal == ref.journal
        for ids, length in prompts:
            assert runs.prefix_hit_blocks(ids, length) == ref.prefix_hit_blocks(ids, length)
        held_ids = {key // runs.ratio for key in runs.keys()}  # noqa: SIM118 (a cache)
        assert {g for g in range(600) if index.holders(g)} == held_ids
