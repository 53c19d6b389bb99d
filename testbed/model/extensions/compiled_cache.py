"""The decode instances' prefix caches compiled (native/prefix_cache.cc): the same state
and the same answers as cache.PrefixCache and cache.HolderIndex, which stay as the
reference the tests hold them to, kept per trace id in columns over all of one run's
caches. No journal (a router's mirror reads the Python cache's; the flow simulator keeps
none). Trace ids must fit 64 bits (`fits`); the simulator checks its workload first."""

from __future__ import annotations

import ctypes
import weakref
from array import array
from collections.abc import Sequence
from pathlib import Path

from testbed import native
from testbed.model.cache import blocks_within, full_block_count, sub_blocks_per_id

SOURCE = Path(__file__).parent.parent / "native" / "prefix_cache.cc"
_p, _i, _long, _ll, _u64 = (ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_longlong,
                            ctypes.c_uint64)
SIGNATURES = (
    ("pc_new", _p, ()), ("pc_free", None, (_p,)), ("pc_add", _i, (_p, _i)),
    ("pc_pin", _i, (_p, _i, _p, _long, _long)), ("pc_unpin", _long, (_p, _i, _p, _long)),
    ("pc_evict", _ll, (_p, _i, _ll)), ("pc_lcp", _long, (_p, _i, _p, _long, _long)),
    ("pc_size", _ll, (_p, _i)), ("pc_pinned", _ll, (_p, _i)), ("pc_cached", _i, (_p, _i, _u64)),
    ("pc_groups", _long, (_p, _i, _p, _p, _long)), ("pc_holders", _long, (_p, _u64, _p, _long)))
ID_LIMIT = 2**64


def library() -> ctypes.CDLL:
    return native.library(SOURCE, SIGNATURES)


def available() -> bool:
    """Whether the compiled caches load here (built if needed)."""
    try:
        library()
    except (native.NativeUnavailable, OSError) as exc:
        native.warn_once(f"the prefix caches run in Python (slower; the same state): {exc}")
        return False
    return True


def fits(hash_ids: Sequence[int]) -> bool:
    return not hash_ids or max(hash_ids) < ID_LIMIT


def _ids(hash_ids: Sequence[int]) -> array:
    return array("Q", hash_ids)


class CompiledHolderIndex:
    """cache.HolderIndex over the compiled caches it makes (one per decode instance)."""

    def __init__(self):
        self._lib = lib = library()
        self._all = lib.pc_new()
        weakref.finalize(self, lib.pc_free, self._all)
        self._names: list[str] = []
        self._out = array("i", bytes(4 * 64))

    def cache(self, block_tokens: int, block_bytes: float, owner: str) -> CompiledPrefixCache:
        number = self._lib.pc_add(self._all, sub_blocks_per_id(block_tokens))
        self._names.append(owner)
        return CompiledPrefixCache(self, number, block_tokens, block_bytes)

    def holders(self, group: int) -> set[str]:
        lib, out = self._lib, self._out
        n = lib.pc_holders(self._all, group, out.buffer_info()[0], len(out))
        if n > len(out):
            self._out = out = array("i", bytes(4 * 2 * n))
            n = lib.pc_holders(self._all, group, out.buffer_info()[0], len(out))
        names = self._names
        return {names[k] for k in out[:n]}


class CompiledPrefixCache:
    """cache.PrefixCache (see it for what each call means), its state compiled."""

    def __init__(self, index: CompiledHolderIndex, number: int, block_tokens: int,
                 block_bytes: float):
        self.block_tokens = block_tokens
        self.ratio = sub_blocks_per_id(block_tokens)
        self.block_bytes = block_bytes
        self._index, self._number = index, number
        self._lib, self._all = index._lib, index._all

    def record_changes(self) -> None:
        raise NotImplementedError("the compiled prefix cache keeps no journal: a router's "
                                  "mirror reads testbed.model.cache.PrefixCache")

    # -- lookup --------------------------------------------------------------------
    def __contains__(self, key: int) -> bool:
        return key % self.ratio < self._lib.pc_cached(self._all, self._number, key // self.ratio)

    def __len__(self) -> int:
        return self._lib.pc_size(self._all, self._number)

    def keys(self) -> list[int]:
        lib, n = self._lib, 0
        groups, counts = array("Q"), array("i")
        while True:
            got = lib.pc_groups(self._all, self._number, groups.buffer_info()[0],
                                counts.buffer_info()[0], n)
            if got <= n:
                break
            n = got
            groups, counts = array("Q", bytes(8 * n)), array("i", bytes(4 * n))
        ratio = self.ratio
        return [g * ratio + j for g, c in zip(groups[:got], counts[:got], strict=True)
                for j in range(c)]

    def prefix_hit_blocks(self, hash_ids: Sequence[int], input_len: int) -> int:
        ids = _ids(hash_ids)
        return self._lib.pc_lcp(self._all, self._number, ids.buffer_info()[0], len(ids),
                                full_block_count(input_len, self.block_tokens))

    def prefix_hit_tokens(self, hash_ids: Sequence[int], input_len: int) -> int:
        return self.block_tokens * self.prefix_hit_blocks(hash_ids, input_len)

    # -- memory --------------------------------------------------------------------
    @property
    def bytes_used(self) -> float:
        return self._lib.pc_size(self._all, self._number) * self.block_bytes

    @property
    def pinned_bytes(self) -> float:
        return self._lib.pc_pinned(self._all, self._number) * self.block_bytes

    @property
    def evictable_bytes(self) -> float:
        lib, all_, number = self._lib, self._all, self._number
        return (lib.pc_size(all_, number) - lib.pc_pinned(all_, number)) * self.block_bytes

    # -- state changes ----------------------------------------------------------------
    def pin(self, hash_ids: Sequence[int], stop: int, start: int = 0) -> None:
        if not 0 <= start <= stop <= len(hash_ids) * self.ratio:
            raise ValueError(f"cannot hold blocks [{start}, {stop}) of {len(hash_ids)} trace ids")
        ids = _ids(hash_ids)
        if self._lib.pc_pin(self._all, self._number, ids.buffer_info()[0], stop, start):
            raise ValueError("list.remove(x): x not in list (the request did not hold it)")

    def unpin(self, hash_ids: Sequence[int], stop: int) -> None:
        ids = _ids(hash_ids)
        bad = self._lib.pc_unpin(self._all, self._number, ids.buffer_info()[0], stop)
        if bad:
            pos = bad - 1
            last = -(-stop // self.ratio) - 1
            held = stop - last * self.ratio if pos == last else self.ratio
            raise KeyError(f"trace id {hash_ids[pos]}: no request holds its first {held} blocks")

    def evict_to(self, budget_bytes: float) -> int:
        return self._lib.pc_evict(self._all, self._number,
                                  blocks_within(budget_bytes, self.block_bytes))
