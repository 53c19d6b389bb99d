"""The compiled prefix caches (model/native/prefix_cache.cc) keep the state the Python
PrefixCache keeps (itself checked block by block, tests/test_cache.py): driven alike by
requests as the decode instances drive them, over several caches sharing one holder
index, every size, pin count, eviction, cached block, prefix hit and holder is the same;
a hold that was never taken is refused alike."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.model.cache import HolderIndex, PrefixCache, block_keys
from testbed.model.extensions.compiled_cache import CompiledHolderIndex, fits
from tests.test_cache import random_prompts


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**6), block_tokens=st.sampled_from([16, 64, 512]))
def test_the_compiled_caches_keep_the_python_caches_state(seed, block_tokens):
    rng = random.Random(seed)
    names = ["d0", "d1", "d2"]
    py_index, c_index = HolderIndex(), CompiledHolderIndex()
    py = {n: PrefixCache(block_tokens, 1.0, py_index, n) for n in names}
    c = {n: c_index.cache(block_tokens, 1.0, n) for n in names}
    prompts = random_prompts(rng)
    live: list[tuple[str, list[int], int, int]] = []  # (cache, ids, blocks, blocks held)
    for _ in range(120):
        op, name = rng.random(), rng.choice(names)
        if op < 0.35:  # assigned: holds its hit
            ids, length = rng.choice(prompts)
            blocks = len(block_keys(ids, length, block_tokens))
            hit = py[name].prefix_hit_blocks(ids, length)
            assert c[name].prefix_hit_blocks(ids, length) == hit
            hit = min(blocks, hit + rng.randrange(0, 3))
            py[name].pin(ids, hit)
            c[name].pin(ids, hit)
            live.append((name, ids, blocks, hit))
        elif op < 0.55 and live:  # its KV landed: holds every block
            k = rng.randrange(len(live))
            name, ids, blocks, held = live[k]
            py[name].pin(ids, blocks, held)
            c[name].pin(ids, blocks, held)
            live[k] = (name, ids, blocks, blocks)
        elif op < 0.8 and live:  # completed or cancelled: releases what it holds
            name, ids, _, held = live.pop(rng.randrange(len(live)))
            py[name].unpin(ids, held)
            c[name].unpin(ids, held)
        else:
            budget = rng.uniform(0, 40 * 512 // block_tokens)
            assert c[name].evict_to(budget) == py[name].evict_to(budget)
        for n in names:
            assert len(c[n]) == len(py[n]) and c[n].pinned_bytes == py[n].pinned_bytes
            assert c[n].evictable_bytes == py[n].evictable_bytes
            assert sorted(c[n].keys()) == sorted(py[n].keys())
            for ids, length in prompts:
                assert c[n].prefix_hit_blocks(ids, length) == py[n].prefix_hit_blocks(ids,
                                                                                     length)
        for g in range(600):
            assert c_index.holders(g) == py_index.holders(g), g
        key = rng.randrange(600) * (512 // block_tokens) + rng.randrange(512 // block_tokens)
        assert (key in c[name]) == (key in py[name])


def test_a_hold_never_taken_is_refused_as_the_python_cache_refuses_it():
    for cache in (PrefixCache(16, 1.0), CompiledHolderIndex().cache(16, 1.0, "d")):
        cache.pin([1, 2, 3], 40)  # all 32 blocks of id 1, 8 of id 2
        with pytest.raises(KeyError, match="trace id 3: no request holds its first 32 blocks"):
            cache.unpin([1, 2, 3], 96)
        with pytest.raises(ValueError, match="not in list"):
            cache.pin([1, 2, 3], 50, 20)  # no request holds 20 of id 1's blocks
        with pytest.raises(ValueError, match="cannot hold blocks"):
            cache.pin([1, 2], 65)


def test_trace_ids_past_64_bits_are_left_to_the_python_cache():
    assert fits([0, 2**64 - 1]) and fits([])
    assert not fits([1, 2**64])
