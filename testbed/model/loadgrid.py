"""A scheduler's load term, T_queue + T_decode (eqs. 6-7), on a grid of (queue excess,
batch): over thousands of candidates each reads its entry instead of computing it.

A candidate's load depends on its queue q and batch beta only through beta and the
excess e = max(0, q + beta - beta_max) (the requests that wait for a slot), so the grid
holds every load the equations can give for e up to the largest seen, each computed by
the scheduler's own `load_time`: a candidate's entry is the very number it would get."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class _Loads:
    """What load_time reads of candidates: their queues and batches."""

    queued: np.ndarray
    batch: np.ndarray


def load_key(queued: int, batch: int, beta_max: int) -> int:
    """One candidate's index into a LoadGrid's values (what LoadGrid.keys gives its row),
    or -1 where the batch lies outside [0, beta_max]: kept current by whoever holds the
    candidates' reports, so a decision over thousands reads the keys, not computes them."""
    if not 0 <= batch <= beta_max:
        return -1
    return max(0, queued + batch - beta_max) * (beta_max + 1) + batch


def seed_keys(table, keys: np.ndarray, beta_max: int, census: KeyCensus | None = None
              ) -> None:
    """Give `table` its rows' load keys (load_key of each, kept by the table's maker), as
    LoadGrid.keys would find them; nothing where a row has none. With the maker's census
    of those keys, row for row, as it stands now (a table is a snapshot: its version says
    whether it still does)."""
    if len(keys) and keys.min() >= 0:
        table.memo[_memo_key(beta_max)] = (keys, int(keys.max()) // (beta_max + 1))
        if census is not None and len(census) == len(keys):
            table.memo[CENSUS] = (census, census.version)


CENSUS = "load-key-census"  # a table's memo entry: (KeyCensus, its version then)


def _memo_key(beta_max: int) -> tuple:
    return ("load-keys", beta_max)


class LoadGrid:
    """load_time at excess 0..E (rows) x batch 0..beta_max (columns), grown as needed."""

    def __init__(self, load_time: Callable, beta_max: int):
        self._load_time = load_time
        self.beta_max = beta_max
        self.values = np.zeros(0)  # flat: excess * (beta_max + 1) + batch
        self.after = np.zeros(0)  # after[k]: the least of values[k + 1:] (inf past the end)
        self.listed: list[float] = []  # values as Python floats, for a few rows at a time
        self._rows = 0

    def keys(self, table) -> np.ndarray | None:
        """Each candidate's index into `values` (a table's, found once per table), the
        grid grown to hold them all; None when a batch is outside [0, beta_max] (the
        equations' own checks then speak)."""
        found = table.derived(_memo_key(self.beta_max),
                              lambda t: self._keys(t.queued, t.batch))
        if found[0] is None:
            return None
        keys, top = found
        if top >= self._rows:
            self._grow(max(top + 1, 2 * self._rows, 1))
        return keys

    def rows(self, table, rows: list[int]) -> list[float] | None:
        """load_time of `rows` of a table, read from the grid (its entries are the
        one-candidate numbers); None where a batch is outside [0, beta_max]."""
        key = self.keys(table)
        if key is None:
            return None
        keys, load = key.tolist(), self.listed
        return [load[keys[row]] for row in rows]

    def _keys(self, queued: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray | None, int]:
        """load_key over columns, in place, and the largest excess."""
        beta_max = self.beta_max
        if not len(batch) or batch.view(np.uint64).max() > beta_max:  # negatives wrap
            return None, 0
        excess = queued + batch
        excess -= beta_max
        np.maximum(excess, 0, out=excess)
        top = int(excess.max())
        excess *= beta_max + 1
        excess += batch
        return excess, top

    def _grow(self, rows: int) -> None:
        beta_max = self.beta_max
        excess = np.arange(rows, dtype=np.int64)[:, None]
        batch = np.ascontiguousarray(np.broadcast_to(
            np.arange(beta_max + 1, dtype=np.int64), (rows, beta_max + 1)))
        # queued = excess + free slots: queue_delay sees exactly this excess
        self.values = np.ascontiguousarray(
            self._load_time(_Loads(excess + (beta_max - batch), batch))).ravel()
        least_from = np.minimum.accumulate(self.values[::-1])[::-1]  # least of values[k:]
        self.after = np.append(least_from[1:], np.inf)
        self.listed = self.values.tolist()
        self._rows = rows


class KeyCensus:
    """How many rows hold each load key, and which, kept current as they publish.

    A NetKV decision over thousands of candidates costs every uncached row of one tier
    the same transfer time, so the cheapest of them is the one with the least load: the
    census finds it by walking up from the lowest key held, instead of reading every
    row (see NetKV's pick by tiers). Rows without a key (-1: a batch outside
    [0, beta_max]) are counted apart; while any is, nobody asks."""

    def __init__(self) -> None:
        self.keys: list[int] = []  # per row
        self.count: list[int] = []  # per key: rows holding it
        self.rows: list[set[int]] = []  # per key: which
        self.keyless = 0  # rows at -1
        self.version = 0  # bumped whenever a row's key changes
        self._low = 0  # no key below it is held

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def of(cls, keys: list[int]) -> KeyCensus:
        """A census of rows holding `keys`, in order."""
        census = cls()
        for key in keys:
            census.move(census.add(), key)
        return census

    def add(self) -> int:
        """A new row, at key 0 (an idle instance's); its index."""
        row = len(self.keys)
        self.keys.append(-1)
        self.keyless += 1
        self.move(row, 0)
        return row

    def move(self, row: int, key: int) -> None:
        old = self.keys[row]
        if old == key:
            return
        self.version += 1
        self.keys[row] = key
        if old < 0:
            self.keyless -= 1
        else:
            self.count[old] -= 1
            self.rows[old].discard(row)
        if key < 0:
            self.keyless += 1
            return
        while key >= len(self.count):
            self.count.append(0)
            self.rows.append(set())
        self.count[key] += 1
        self.rows[key].add(row)
        if key < self._low:
            self._low = key

    def lowest(self, skip: dict[int, int]) -> int | None:
        """The lowest key held by a row not skipped (`skip`: key -> how many of its rows
        to pass over), or None if every row is skipped."""
        count = self.count
        low = self._low
        while low < len(count) and not count[low]:
            low += 1
        self._low = low
        key = low
        while key < len(count) and count[key] <= skip.get(key, 0):
            key += 1
        return key if key < len(count) else None
