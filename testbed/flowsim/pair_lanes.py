"""The Transfer Engine's lanes in the flow model (traffic_classes.kv_lanes): a pair's shards
share that many connections; a shard that finds them all busy waits, first come first
served, for one to free. With `first_alone` a pair's first write goes alone, as the
workers send it (the engine's descriptor exchange refused shards arriving together). The
simulator, the calibration's probe model and the replay of a run's transfers keep them
with this one ledger; ns-3's program keeps its own, per packet, which also opens the
lanes one at a time (a round trip each: not modelled here)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable


class Lanes:
    """Per pair, the shards on its lanes and those waiting for one; 0 lanes: no limit."""

    def __init__(self, lanes: int, first_alone: bool = False):
        self.lanes = lanes
        self.first_alone = first_alone
        self._busy: dict[Hashable, int] = {}
        self._waiting: dict[Hashable, deque] = {}
        self._greeted: set[Hashable] = set()  # pairs whose first write ended

    def _room(self, pair: Hashable) -> int:
        most = self.lanes if not self.first_alone or pair in self._greeted else 1
        return max(0, most - self._busy.get(pair, 0))

    def admit(self, pair: Hashable, shards: list) -> list:
        """Of `shards` handed over now, those that take a lane at once (the rest wait,
        behind any that already do)."""
        if not self.lanes:
            return list(shards)
        waiting = self._waiting.setdefault(pair, deque())
        free = 0 if waiting else self._room(pair)
        waiting.extend(shards[free:])
        self._busy[pair] = self._busy.get(pair, 0) + len(shards[:free])
        return list(shards[:free])

    def release(self, pair: Hashable, n: int = 1,
                keep: Callable[[object], bool] = lambda shard: True) -> list:
        """`n` of the pair's shards ended: the waiting ones that take the freed lanes, in
        order; one `keep` refuses (its transfer abandoned) is dropped."""
        if not self.lanes:
            return []
        self._busy[pair] = max(0, self._busy.get(pair, 0) - n)
        if n:
            self._greeted.add(pair)
        waiting, out = self._waiting.get(pair), []
        while waiting and self._room(pair) > 0:
            shard = waiting.popleft()
            if keep(shard):
                out.append(shard)
                self._busy[pair] += 1
        return out
