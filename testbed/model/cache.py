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
from collections import deque
from collections.abc import Container, Mapping, Sequence
from itertools import islice

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

    def _gained(self, group: int, owner: str) -> None:
        self._holders.setdefault(group, set()).add(owner)

    def _lost(self, group: int, owner: str) -> None:
        held = self._holders[group]
        held.discard(owner)
        if not held:
            del self._holders[group]


_NOBODY: frozenset = frozenset()


class PrefixCache:
    """Blocks of KV held by one decode instance, with pin counts and LRU order."""

    def __init__(self, block_tokens: int, block_bytes: float,
                 index: HolderIndex | None = None, owner: str = ""):
        self.block_tokens = block_tokens
        self.ratio = sub_blocks_per_id(block_tokens)
        self.block_bytes = block_bytes
        self._pinned: dict[int, int] = {}  # key -> pin count (> 0)
        # unpinned, oldest first: a dict keeps insertion order and updates in bulk in C
        self._lru: dict[int, None] = {}
        self._group_count: dict[int, int] = {}  # trace id -> cached sub-blocks of it
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
        return key in self._pinned or key in self._lru

    def __len__(self) -> int:
        return len(self._pinned) + len(self._lru)

    def keys(self) -> list[int]:
        return list(self._pinned) + list(self._lru)

    def prefix_hit_blocks(self, hash_ids: Sequence[int], input_len: int) -> int:
        """|LCP_block(h_r, K_d)|; does not touch LRU order (looking is not using)."""
        return lcp_blocks(hash_ids, input_len, self.block_tokens, self._group_count, self)

    def prefix_hit_tokens(self, hash_ids: Sequence[int], input_len: int) -> int:
        return self.block_tokens * self.prefix_hit_blocks(hash_ids, input_len)

    # -- memory --------------------------------------------------------------------
    @property
    def bytes_used(self) -> float:
        return len(self) * self.block_bytes

    @property
    def pinned_bytes(self) -> float:
        return len(self._pinned) * self.block_bytes

    @property
    def evictable_bytes(self) -> float:
        return len(self._lru) * self.block_bytes

    # -- state changes ----------------------------------------------------------------
    # A request pins, unpins and evicts about a thousand 16-token blocks at a time. The
    # common case (distinct keys, none pinned by another live request) runs as bulk dict
    # operations; anything else takes the loop, one key at a time. Both leave the same
    # state in the same order.
    BULK = 32  # calls with fewer keys than this take the loop

    def pin(self, keys: Sequence[int]) -> None:
        """Pin blocks a live request uses; inserts the ones not yet cached."""
        pinned, lru = self._pinned, self._lru
        if len(keys) >= self.BULK and pinned.keys().isdisjoint(keys) and \
                len(set(keys)) == len(keys):
            cached = [k for k in keys if k in lru]
            if len(cached) < len(keys):
                fresh = [k for k in keys if k not in lru] if cached else keys
                self._groups_changed(fresh, +1)
                if self.journal is not None:
                    self.journal.extend((1, k) for k in fresh)
            deque(map(lru.__delitem__, cached), maxlen=0)
            pinned.update(dict.fromkeys(keys, 1))
            return
        for key in keys:
            count = self._pinned.get(key)
            if count is not None:
                self._pinned[key] = count + 1
                continue
            if key in self._lru:
                del self._lru[key]
            else:
                group = key // self.ratio
                if self._index is not None and group not in self._group_count:
                    self._index._gained(group, self._owner)
                _count_in(self._group_count, group)
                if self.journal is not None:
                    self.journal.append((1, key))
            self._pinned[key] = 1

    def unpin(self, keys: Sequence[int]) -> None:
        """Release a request's blocks; tail first, so the prefix head stays most recent."""
        pinned = self._pinned
        if len(keys) >= self.BULK:
            counts = list(map(pinned.get, keys))
            if None not in counts and max(counts) == 1 and len(set(keys)) == len(keys):
                deque(map(pinned.__delitem__, keys), maxlen=0)
                self._lru.update(dict.fromkeys(reversed(keys)))
                return
        for key in reversed(keys):
            count = self._pinned.get(key)
            if count is None:
                raise KeyError(f"block {key} is not pinned")
            if count > 1:
                self._pinned[key] = count - 1
            else:
                del self._pinned[key]
                self._lru[key] = None

    def evict_to(self, budget_bytes: float) -> int:
        """Evict least-recently-used unpinned blocks until the cache fits the budget."""
        keep = max(0, math.floor(budget_bytes / self.block_bytes + 1e-9))
        excess = min(len(self) - keep, len(self._lru))
        if excess <= 0:
            return 0
        # the oldest, in one pass (taking them one by one would rescan the holes that
        # deletions leave at the front of a dict)
        victims = list(islice(self._lru, excess))
        deque(map(self._lru.__delitem__, victims), maxlen=0)
        self._groups_changed(victims, -1)
        if self.journal is not None:
            self.journal.extend((-1, k) for k in victims)
        return excess

    def _groups_changed(self, keys: Sequence[int], sign: int) -> None:
        """Blocks in (+1) or out (-1): per trace id, the count and the holder index."""
        changes = ((k // self.ratio, 1) for k in keys)
        if len(keys) >= self.BULK:
            try:
                groups, counts = np.unique(np.asarray(keys, dtype=np.int64) // self.ratio,
                                           return_counts=True)
                changes = zip(groups.tolist(), counts.tolist(), strict=True)
            except OverflowError:  # ids beyond 64 bits
                pass
        group_count, index = self._group_count, self._index
        for group, n in changes:
            left = group_count.get(group, 0) + sign * n
            if left:
                group_count[group] = left
            else:
                del group_count[group]
            if index is not None and left == (n if sign > 0 else 0):
                (index._gained if sign > 0 else index._lost)(group, self._owner)
