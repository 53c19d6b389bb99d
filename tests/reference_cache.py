"""The prefix cache as it was before it kept trace ids as runs: one entry per block, pin
counts per block, an LRU of blocks. Kept as the reference the run-based
testbed.model.cache.PrefixCache is checked against (tests/test_cache.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from testbed.model.cache import lcp_blocks, sub_blocks_per_id


class KeyCache:
    """Blocks keyed id * ratio + j; unpinned blocks in a dict kept oldest first."""

    def __init__(self, block_tokens: int, block_bytes: float):
        self.block_tokens = block_tokens
        self.ratio = sub_blocks_per_id(block_tokens)
        self.block_bytes = block_bytes
        self.pinned: dict[int, int] = {}
        self.lru: dict[int, None] = {}
        self.group_count: dict[int, int] = {}
        self.journal: list[tuple[int, int]] = []

    def __contains__(self, key: int) -> bool:
        return key in self.pinned or key in self.lru

    def __len__(self) -> int:
        return len(self.pinned) + len(self.lru)

    def prefix_hit_blocks(self, hash_ids: Sequence[int], input_len: int) -> int:
        return lcp_blocks(hash_ids, input_len, self.block_tokens, self.group_count, self)

    def pin(self, keys: Sequence[int]) -> None:
        for key in keys:
            count = self.pinned.get(key)
            if count is not None:
                self.pinned[key] = count + 1
                continue
            if key in self.lru:
                del self.lru[key]
            else:
                group = key // self.ratio
                self.group_count[group] = self.group_count.get(group, 0) + 1
                self.journal.append((1, key))
            self.pinned[key] = 1

    def unpin(self, keys: Sequence[int]) -> None:
        for key in reversed(keys):
            count = self.pinned[key]
            if count > 1:
                self.pinned[key] = count - 1
            else:
                del self.pinned[key]
                self.lru[key] = None

    def evict_to(self, budget_bytes: float) -> int:
        keep = max(0, math.floor(budget_bytes / self.block_bytes + 1e-9))
        excess = min(len(self) - keep, len(self.lru))
        for _ in range(max(0, excess)):
            key = next(iter(self.lru))
            del self.lru[key]
            group = key // self.ratio
            self.group_count[group] -= 1
            if not self.group_count[group]:
                del self.group_count[group]
            self.journal.append((-1, key))
        return max(0, excess)
