"""What a router knows of each decode instance when it places a request: one report
(`Candidate`), or many as columns (`CandidateTable`), which the schedulers rank on arrays."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Candidate:
    """A decode instance as the router last saw it."""

    instance: str
    free_memory: float  # m_d in bytes; evictable cache counts as free
    queued: int  # q_d: assigned, not yet in the batch
    batch: int  # beta_d
    hit_tokens: int  # lambda_r(d) for this request


_MISSING = object()


class CandidateTable:
    """Candidates as columns: names, free memory, queued, batch, hit tokens.

    A table cut from another (`where`) keeps the rows it took from it, so what is known
    per candidate of the whole set (the tier row from a prefill) is looked up, not rebuilt;
    its columns and names are gathered only if asked for."""

    def __init__(self, names: Sequence[str], free_memory, queued, batch, hit_tokens,
                 index: dict[str, int] | None = None, hit_rows: np.ndarray | None = None):
        self._names: tuple[str, ...] | None = tuple(names)
        self._free_memory = np.asarray(free_memory, dtype=float)
        self._queued = np.asarray(queued, dtype=np.int64)
        self._batch = np.asarray(batch, dtype=np.int64)
        self._hit_tokens = np.asarray(hit_tokens, dtype=np.int64)
        self._index = index  # name -> row, if the caller has it
        self._hit_rows = hit_rows  # rows with a cached prefix, ascending, if the caller knows
        self.memo: dict = {}  # what a scheduler derives from these columns, kept with them
        self.base: tuple[CandidateTable, np.ndarray] | None = None  # cut from, rows

    def _column(self, name: str) -> np.ndarray:
        value = getattr(self, name)
        if value is None:  # a cut's, gathered from its root's
            table, rows = self.base
            value = getattr(table, name)[rows]
            setattr(self, name, value)
        return value

    free_memory = property(lambda self: self._column("_free_memory"))
    queued = property(lambda self: self._column("_queued"))
    batch = property(lambda self: self._column("_batch"))
    hit_tokens = property(lambda self: self._column("_hit_tokens"))

    @property
    def hit_rows(self) -> np.ndarray:
        """The rows with a cached prefix, ascending: few of many, so a scheduler costs
        them apart from the rest (a table is a snapshot: found once)."""
        if self._hit_rows is None:
            self._hit_rows = np.flatnonzero(self.hit_tokens != 0)
        return self._hit_rows

    def derived(self, key, compute):
        """`compute(self)`, once per table: what a scheduler derives from the columns is
        kept with them (a table is a snapshot of the reports)."""
        value = self.memo.get(key, _MISSING)
        if value is _MISSING:
            value = self.memo[key] = compute(self)
        return value

    @property
    def names(self) -> tuple[str, ...]:
        if self._names is None:
            table, rows = self.base
            names = table.names
            self._names = tuple(names[i] for i in rows.tolist())
        return self._names

    @classmethod
    def of(cls, candidates: Sequence[Candidate] | CandidateTable) -> CandidateTable:
        if isinstance(candidates, CandidateTable):
            return candidates
        return cls([c.instance for c in candidates], [c.free_memory for c in candidates],
                   [c.queued for c in candidates], [c.batch for c in candidates],
                   [c.hit_tokens for c in candidates])

    def __len__(self) -> int:
        return len(self._free_memory) if self.base is None else len(self.base[1])

    def __getitem__(self, i: int) -> Candidate:
        if self.base is not None:
            table, rows = self.base
            return table[int(rows[i])]
        return Candidate(self.names[i], float(self._free_memory[i]), int(self._queued[i]),
                         int(self._batch[i]), int(self._hit_tokens[i]))

    def __iter__(self) -> Iterator[Candidate]:
        columns = (self.free_memory.tolist(), self.queued.tolist(), self.batch.tolist(),
                   self.hit_tokens.tolist())
        return (Candidate(*row) for row in zip(self.names, *columns, strict=True))

    def get(self, name: str) -> Candidate | None:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self.names)}
        i = self._index.get(name)
        return None if i is None else self[i]

    def where(self, mask: np.ndarray) -> CandidateTable:
        """The candidates where `mask` holds (names keep their order)."""
        if mask.all():
            return self
        rows = np.flatnonzero(mask)
        cut = CandidateTable.__new__(CandidateTable)
        cut._names = cut._free_memory = cut._queued = cut._batch = cut._hit_tokens = None
        cut._index = cut._hit_rows = None
        cut.memo = {}
        root, above = self.root()
        cut.base = (root, rows if above is None else above[rows])
        return cut

    def root(self) -> tuple[CandidateTable, np.ndarray | None]:
        """The table this one was cut from, and its rows there (None: it is the root)."""
        return (self, None) if self.base is None else self.base


def find(candidates: Sequence[Candidate] | CandidateTable, name: str) -> Candidate | None:
    """The candidate for instance `name`, if listed."""
    if isinstance(candidates, CandidateTable):
        return candidates.get(name)
    return next((c for c in candidates if c.instance == name), None)
