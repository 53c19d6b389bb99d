"""Per-decode-instance prefix cache: block-level longest common prefix, LRU, memory.

How a Mooncake request maps to blocks: the trace gives one hash id per 512-token block
(`hash_ids`, chained, so equal ids at equal positions mean an equal prefix). With
`block_tokens` = 512 the cache keys are those ids. With the paper's 16-token blocks each
512-token id is split into 512/16 = 32 sub-blocks keyed (id, j); the last id of a
request covers only ceil(remaining/16) sub-blocks. Only *full* blocks are cached and
matched (a partial tail block is never reused, as in vLLM), so a request of l tokens has
floor(l / block_tokens) cacheable blocks and a hit of lambda = block_tokens * |LCP|.

Blocks pinned by a live request are never evicted; unpinned blocks form an LRU list.
When a request releases its blocks they are touched tail-first, so the head of a shared
prefix is the last thing evicted and a chain is cut from its end, not its middle.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Container, Mapping, Sequence

import numpy as np

TRACE_BLOCK_TOKENS = 512


def sub_blocks_per_id(block_tokens: int, trace_block_tokens: int = TRACE_BLOCK_TOKENS) -> int:
    if block_tokens <= 0 or trace_block_tokens % block_tokens:
        raise ValueError(
            f"block_tokens must divide the trace block size {trace_block_tokens}, got {block_tokens}"
        )
    return trace_block_tokens // block_tokens


def full_block_count(input_len: int, block_tokens: int) -> int:
    return input_len // block_tokens


def block_keys(hash_ids: Sequence[int], input_len: int, block_tokens: int) -> list[int]:
    """Integer keys of a request's full blocks: id * ratio + j for sub-block j of id."""
    ratio = sub_blocks_per_id(block_tokens)
    n = full_block_count(input_len, block_tokens)
    if n > len(hash_ids) * ratio:
        raise ValueError(
            f"{input_len} tokens need {n} blocks of {block_tokens} but hash_ids cover "
            f"only {len(hash_ids) * ratio}"
        )
    if n >= 4 * ratio:  # long prompts: the same keys from whole-array arithmetic
        try:
            ids = np.asarray(hash_ids[:-(-n // ratio)], dtype=np.int64) * ratio
            return (np.repeat(ids, ratio)[:n] + np.tile(np.arange(ratio), len(ids))[:n]).tolist()
        except OverflowError:  # ids beyond 64 bits
            pass
    return [hash_ids[k // ratio] * ratio + k % ratio for k in range(n)]


def blocks_within(budget_bytes: float, block_bytes: float) -> int:
    """Whole blocks a memory budget holds (a budget of exactly k blocks, in floating
    point, holds k)."""
    return max(0, math.floor(budget_bytes / block_bytes + 1e-9))


def _count_in(group_count: dict[int, int], group: int) -> None:
    group_count[group] = group_count.get(group, 0) + 1


def _count_out(group_count: dict[int, int], group: int) -> None:
    left = group_count[group] - 1
    if left:
        group_count[group] = left
    else:
        del group_count[group]


def lcp_blocks(hash_ids: Sequence[int], input_len: int, block_tokens: int,
               group_count: Mapping[int, int], blocks: Container[int]) -> int:
    """Leading full blocks of a request present in `blocks`.

    Walks trace ids, not sub-blocks, where a whole id is present (group_count[id] =
    present sub-blocks of it); the cache and a router's mirror of it share this walk.
    """
    ratio = sub_blocks_per_id(block_tokens)
    n = full_block_count(input_len, block_tokens)
    matched = 0
    for group in hash_ids:
        if matched >= n:
            break
        need = min(ratio, n - matched)
        count = group_count.get(group, 0)
        if count == 0:
            break
        if count < ratio:
            base = group * ratio
            for j in range(need):
                if base + j not in blocks:
                    return matched + j
        matched += need
    return min(matched, n)


class BlockIndex:
    """A router's mirror of one decode instance's cached blocks, kept from its reports."""

    def __init__(self, block_tokens: int):
        self.block_tokens = block_tokens
        self.ratio = sub_blocks_per_id(block_tokens)
        self._keys: set[int] = set()
        self._group_count: dict[int, int] = {}

    def __contains__(self, key: int) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def update(self, added: Sequence[int], removed: Sequence[int]) -> None:
        for key in removed:
            if key in self._keys:
                self._keys.discard(key)
                _count_out(self._group_count, key // self.ratio)
        for key in added:
            if key not in self._keys:
                self._keys.add(key)
                _count_in(self._group_count, key // self.ratio)

    def prefix_hit_tokens(self, hash_ids: Sequence[int], input_len: int) -> int:
        return self.block_tokens * lcp_blocks(hash_ids, input_len, self.block_tokens,
                                              self._group_count, self)


class HolderIndex:
    """Which caches hold any block of a trace id, over many caches: a request's prefix
    can hit only where its first id is held, so a scheduler over a thousand decode
    instances walks the prefix on those alone (the others hit nothing)."""

    def __init__(self):
        self._holders: dict[int, set[str]] = {}

    def holders(self, group: int) -> set[str]:
        return self._holders.get(group, _NOBODY)

    def cache(self, block_tokens: int, block_bytes: float, owner: str) -> PrefixCache:
        """A prefix cache this index follows, of decode instance `owner`."""
        return PrefixCache(block_tokens, block_bytes, self, owner)

    def _lost(self, group: int, owner: str) -> None:
        held = self._holders[group]
        held.discard(owner)
        if not held:
            del self._holders[group]


_NOBODY: frozenset = frozenset()


class PrefixCache:
    """Blocks of KV held by one decode instance, with pins and LRU order.

    Kept per trace id, not per block: a live request pins a prefix of its blocks (the hit
    when it is assigned, all of them once its KV lands), and releasing one touches its
    blocks tail first, so what a trace id has cached is always its first c sub-blocks, of
    which the first p are pinned (p = the longest live hold on it), and its unpinned ones
    [p, c) are runs of equal recency, the higher the older. The LRU is a list of runs; a
    request costs its trace ids, not its thousand 16-token blocks. The state equals a
    block-by-block cache's (tests/reference_cache.py).
    """

    def __init__(self, block_tokens: int, block_bytes: float,
                 index: HolderIndex | None = None, owner: str = ""):
        self.block_tokens = block_tokens
        self.ratio = sub_blocks_per_id(block_tokens)
        self.block_bytes = block_bytes
        self._cached: dict[int, int] = {}  # trace id -> c: sub-blocks [0, c) cached
        self._holds: dict[int, list[int]] = {}  # trace id -> each live hold's length
        # trace id -> its LRU runs [id, lo, hi], lowest (newest) first
        self._runs: dict[int, list[list[int]]] = {}
        self._lru: OrderedDict[int, list[int]] = OrderedDict()  # run number -> run, oldest first
        self._run_number = 0
        self._size = 0  # cached blocks
        self._pinned = 0  # pinned blocks
        self.journal: list[tuple[int, int]] | None = None  # (+1 | -1, key) when enabled
        self._index, self._owner = index, owner

    def record_changes(self) -> None:
        """Journal insertions and evictions, for a router that mirrors this cache."""
        self.journal = []

    def drain_changes(self) -> tuple[list[int], list[int]]:
        """(keys added, keys removed) since the last drain, net of each other."""
        added: dict[int, None] = {}
        removed: dict[int, None] = {}
        for sign, key in self.journal or ():
            if sign > 0:
                if key in removed:
                    del removed[key]
                else:
                    added[key] = None
            elif key in added:
                del added[key]
            else:
                removed[key] = None
        if self.journal is not None:
            self.journal.clear()
        return list(added), list(removed)

    # -- lookup --------------------------------------------------------------------
    def __contains__(self, key: int) -> bool:
        return key % self.ratio < self._cached.get(key // self.ratio, 0)

    def __len__(self) -> int:
        return self._size

    def keys(self) -> list[int]:
        ratio = self.ratio
        return [group * ratio + j for group, c in self._cached.items() for j in range(c)]

    def prefix_hit_blocks(self, hash_ids: Sequence[int], input_len: int) -> int:
        """|LCP_block(h_r, K_d)|; does not touch LRU order (looking is not using)."""
        return lcp_blocks(hash_ids, input_len, self.block_tokens, self._cached, self)

    def prefix_hit_tokens(self, hash_ids: Sequence[int], input_len: int) -> int:
        return self.block_tokens * self.prefix_hit_blocks(hash_ids, input_len)

    # -- memory --------------------------------------------------------------------
    @property
    def bytes_used(self) -> float:
        return self._size * self.block_bytes

    @property
    def pinned_bytes(self) -> float:
        return self._pinned * self.block_bytes

    @property
    def evictable_bytes(self) -> float:
        return (self._size - self._pinned) * self.block_bytes

    # -- state changes ----------------------------------------------------------------
    def pin(self, hash_ids: Sequence[int], stop: int, start: int = 0) -> None:
        """A live request that holds its first `start` blocks now holds its first `stop`
        (inserting the ones not yet cached)."""
        ratio = self.ratio
        if not 0 <= start <= stop <= len(hash_ids) * ratio:
            raise ValueError(f"cannot hold blocks [{start}, {stop}) of {len(hash_ids)} trace ids")
        holds_of, runs_of, cached = self._holds, self._runs, self._cached
        holders = self._index._holders if self._index is not None else None
        owner, journal = self._owner, self.journal
        pinned = size = 0  # added to the counters once, also when a bad hold raises
        try:
            for pos in range(start // ratio, -(-stop // ratio)):
                group, base = hash_ids[pos], pos * ratio
                held = start - base if start > base else 0
                wanted = stop - base if stop - base < ratio else ratio
                if held >= wanted:
                    continue
                holds = holds_of.get(group)
                if holds is None:  # nobody holds it: a new hold, the common case
                    holds_of[group] = [wanted]
                    top = 0
                else:
                    top = max(holds)
                    if held:
                        holds.remove(held)  # ValueError: the request did not hold it
                    holds.append(wanted)
                    if wanted <= top:
                        continue
                pinned += wanted - top
                runs = runs_of.get(group)
                if runs is not None:
                    while runs and runs[0][1] < wanted:  # [top, wanted) leaves the LRU
                        run = runs[0]
                        if run[2] <= wanted:
                            del self._lru[run[3]]
                            runs.pop(0)
                        else:
                            run[1] = wanted
                    if not runs:
                        del runs_of[group]
                c = cached.get(group, 0)
                if wanted > c:  # and [c, wanted) comes in
                    if c == 0 and holders is not None:  # HolderIndex: this cache holds it now
                        owners = holders.get(group)
                        if owners is None:
                            holders[group] = {owner}
                        else:
                            owners.add(owner)
                    if journal is not None:
                        first = group * ratio
                        journal.extend((1, first + j) for j in range(c, wanted))
                    cached[group] = wanted
                    size += wanted - c
        finally:
            self._pinned += pinned
            self._size += size

    def unpin(self, hash_ids: Sequence[int], stop: int) -> None:
        """Release a request's first `stop` blocks; tail first, so the prefix head stays
        most recent."""
        ratio, holds_of, lru, runs_of = self.ratio, self._holds, self._lru, self._runs
        released = 0
        number = self._run_number
        held = stop - (-(-stop // ratio) - 1) * ratio  # the last id's share; ratio before it
        try:
            for pos in reversed(range(-(-stop // ratio))):
                group = hash_ids[pos]
                holds = holds_of.get(group)
                if holds is None or held not in holds:
                    raise KeyError(f"trace id {group}: no request holds its first {held} blocks")
                if len(holds) == 1:  # its only hold: the common case
                    del holds_of[group]
                    top, rest = held, 0
                else:
                    top = max(holds)
                    holds.remove(held)
                    rest = max(holds)
                    if rest >= top:
                        held = ratio
                        continue
                # [rest, top) is unpinned now: the newest run of this id
                released += top - rest
                lru[number] = run = [group, rest, top, number]
                number += 1
                runs = runs_of.get(group)
                if runs is None:
                    runs_of[group] = [run]
                else:
                    runs.insert(0, run)
                held = ratio
        finally:
            self._run_number = number
            self._pinned -= released

    def evict_to(self, budget_bytes: float) -> int:
        """Evict least-recently-used unpinned blocks until the cache fits the budget."""
        keep = blocks_within(budget_bytes, self.block_bytes)
        excess = min(self._size - keep, self._size - self._pinned)
        if excess <= 0:
            return 0
        left, lru, cached = excess, self._lru, self._cached
        while left:
            run = lru[next(iter(lru))]  # the oldest run: its id's highest
            group, lo, hi = run[0], run[1], run[2]
            k = min(hi - lo, left)
            if self.journal is not None:
                base = group * self.ratio
                self.journal.extend((-1, base + j) for j in range(hi - 1, hi - k - 1, -1))
            if k == hi - lo:
                lru.popitem(last=False)
                runs = self._runs[group]
                runs.pop()
                if not runs:
                    del self._runs[group]
            else:
                run[2] = hi - k
            c = cached[group] - k
            if c:
                cached[group] = c
            else:
                del cached[group]
                if self._index is not None:
                    self._index._lost(group, self._owner)
            left -= k
        self._size -= excess
        return excess
