"""tau(src, dst) for many pairs at once, without storing them pair by pair.

The oracle publishes a tier for every (prefill, decode) pair; stored as a dict that is a
million entries at 8,192 GPUs and 67 million at 65,536, built before the first request.
A TierMap answers the same lookups from the instances' places (server, rack, pod), and
counts pairs per tier without listing them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

import numpy as np


class TierMap(Mapping):
    """Every (src, dst) of `sources` x `destinations` with src != dst -> its tier."""

    def __init__(self, spec, sources: Sequence[str], destinations: Sequence[str]):
        self._spec = spec
        self._sources, self._destinations = tuple(sources), tuple(destinations)
        self._src, self._dst = frozenset(sources), frozenset(destinations)
        self._rows: dict[tuple[str, ...], tuple[np.ndarray, frozenset]] = {}
        self._places: tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray] | None = None

    def __getitem__(self, pair: tuple[str, str]) -> int:
        src, dst = pair
        if src == dst or src not in self._src or dst not in self._dst:
            raise KeyError(pair)
        return self._spec.tier(src, dst)

    def __contains__(self, pair) -> bool:
        try:
            src, dst = pair
        except (TypeError, ValueError):
            return False
        return src != dst and src in self._src and dst in self._dst

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((s, d) for s in self._sources for d in self._destinations if s != d)

    def __len__(self) -> int:
        return len(self._src) * len(self._dst) - len(self._src & self._dst)

    def counts(self) -> dict[int, int]:
        """Pairs per tier, from how many destinations share each place (no pair listed)."""
        by = self._spec.by_name
        places = [by[d] for d in self._dst]
        server = Counter(i.server for i in places)
        rack = Counter(i.rack for i in places)
        pod = Counter(i.pod for i in places)
        out = Counter()
        for name in self._src:
            me, self_pair = by[name], int(name in self._dst)
            same = (server[me.server] - self_pair, rack[me.rack] - self_pair,
                    pod[me.pod] - self_pair)
            out[0] += same[0]
            out[1] += same[1] - same[0]
            out[2] += same[2] - same[1]
            out[3] += len(self._dst) - self_pair - same[2]
        return {t: n for t, n in sorted(out.items()) if n}

    def tiers_present(self) -> set[int]:
        return set(self.counts())

    def row(self, src: str, names: tuple[str, ...]) -> np.ndarray:
        """The tier from `src` to each of `names`, on arrays (a scheduler scores thousands
        of candidates per decision); a pair outside the map raises KeyError, as a lookup."""
        at, servers, racks, pods = self._place_arrays()
        hit = self._rows.get(names)
        if hit is None:
            missing = next((n for n in names if n not in self._dst), None)
            if missing is not None:
                raise KeyError((src, missing))
            if len(self._rows) > 16:
                self._rows.clear()
            hit = self._rows[names] = (np.array([at[n] for n in names], dtype=np.int64),
                                       frozenset(names))
        index, members = hit
        if src not in self._src or src in members:
            raise KeyError((src, src if src in members else names[0] if names else None))
        me = self._spec.by_name[src]
        return np.where(servers[index] == me.server, 0,
                        np.where(racks[index] == me.rack, 1,
                                 np.where(pods[index] == me.pod, 2, 3))).astype(np.int64)

    def _place_arrays(self):
        if self._places is None:
            inst = [self._spec.by_name[n] for n in self._destinations]
            self._places = ({n: k for k, n in enumerate(self._destinations)},
                            np.array([i.server for i in inst], dtype=np.int64),
                            np.array([i.rack for i in inst], dtype=np.int64),
                            np.array([i.pod for i in inst], dtype=np.int64))
        return self._places
