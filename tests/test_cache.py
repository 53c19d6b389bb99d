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
    keys = block_keys(hashes, 3 * 512, 16)
    cache.pin(keys[:40])  # all of id 3, 8 sub-blocks of id 4
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
            cache.pin(keys)
            cache.unpin(keys)
        cache.evict_to(rng.randrange(0, 200))
    assert len(cache) <= 400


def test_lru_evicts_tails_first_and_never_pinned_blocks():
    cache = PrefixCache(512, block_bytes=10.0)
    cache.pin([1, 2, 3])
    cache.unpin([1, 2, 3])  # released tail first: 3 is least recent
    cache.pin([9])  # pinned by a live request
    assert cache.bytes_used == 40 and cache.pinned_bytes == 10 and cache.evictable_bytes == 30
    assert cache.evict_to(30) == 1
    assert 3 not in cache and 1 in cache and 2 in cache
    assert cache.prefix_hit_blocks([1, 2, 3], 3 * 512) == 2
    assert cache.evict_to(0) == 2
    assert 9 in cache and cache.bytes_used == 10  # the pinned block survives


def test_touching_a_cached_prefix_makes_it_recent():
    cache = PrefixCache(512, block_bytes=1.0)
    cache.pin([1]); cache.unpin([1])  # noqa: E702
    cache.pin([2]); cache.unpin([2])  # noqa: E702
    cache.pin([1]); cache.unpin([1])  # 1 reused: now 2 is the oldest  # noqa: E702
    cache.evict_to(1)
    assert 1 in cache and 2 not in cache


def test_refcounted_pins_and_unpin_errors():
    cache = PrefixCache(512, block_bytes=1.0)
    cache.pin([5]); cache.pin([5])  # noqa: E702
    cache.unpin([5])
    assert cache.evict_to(0) == 0 and 5 in cache
    cache.unpin([5])
    assert cache.evict_to(0) == 1
    with pytest.raises(KeyError):
        cache.unpin([5])


def _state(cache):
    return (dict(cache._pinned), list(cache._lru), dict(cache._group_count),
            list(cache.journal or ()))


def _both(caches, call) -> str:
    """Run `call` on each cache; both must succeed or both fail the same way."""
    outcomes = []
    for cache in caches:
        try:
            call(cache)
            outcomes.append("ok")
        except KeyError:
            outcomes.append("KeyError")
    assert outcomes[0] == outcomes[1]
    return outcomes[0]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_bulk_operations_leave_what_the_key_by_key_loop_leaves(seed):
    """pin/unpin/evict_to take bulk dict operations in the common case; the state (pin
    counts, LRU order, per-id counts, journal, holder index) equals the loop's, also
    when keys repeat, pins are shared and an unpin fails half-way."""
    from testbed.model.cache import HolderIndex

    rng = random.Random(seed)
    index_bulk, index_loop = HolderIndex(), HolderIndex()
    bulk = PrefixCache(16, 1.0, index_bulk, "d")
    loop = PrefixCache(16, 1.0, index_loop, "d")
    loop.BULK = 10**9
    caches = (bulk, loop)
    for cache in caches:
        cache.record_changes()
    prompts = [block_keys([rng.randrange(6) * 100 + j for j in range(8)],
                          rng.randrange(16, 4096), 16) for _ in range(12)]
    live: list[list[int]] = []
    for _ in range(60):
        op = rng.random()
        if op < 0.45:
            keys = rng.choice(prompts)[:rng.randrange(1, 257)]
            if rng.random() < 0.1:
                keys = keys + keys[:3]  # a key twice: the loop's way
            _both(caches, lambda c, k=keys: c.pin(k))
            live.append(keys)
        elif op < 0.9 and live:
            keys = live.pop(rng.randrange(len(live))) if op < 0.8 else \
                rng.choice(prompts)[:rng.randrange(1, 200)]  # maybe never pinned
            _both(caches, lambda c, k=keys: c.unpin(k))
        else:
            budget = rng.randrange(0, 3000)
            assert bulk.evict_to(budget) == loop.evict_to(budget)
        assert _state(bulk) == _state(loop)
        groups = {k // 32 for k in bulk.keys()}  # noqa: SIM118 (a cache, not a dict)
        assert {g for g in range(600) if index_bulk.holders(g)} == groups
        assert all(index_bulk.holders(g) == index_loop.holders(g) for g in range(600))
