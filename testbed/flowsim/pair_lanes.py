"""The Transfer Engine's lanes in the flow model (traffic_classes.kv_lanes): a pair's shards
share that many connections; a shard that finds them all busy waits, first come first
served, for one to free. The simulator, the calibration's probe model and the replay of a
run's transfers keep them with this one ledger; ns-3's program keeps its own, per packet."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable


class Lanes:
    """Per pair, the shards on its lanes and those waiting for one; 0 lanes: no limit."""

    def __init__(self, lanes: int):
        self.lanes = lanes
        self._busy: dict[Hashable, int] = {}
        self._waiting: dict[Hashable, deque] = {}

    def admit(self, pair: Hashable, shards: list) -> list:
        """Of `shards` handed over now, those that take a lane at once (the rest wait,
        behind any that already do)."""
        if not self.lanes:
            return list(shards)
        waiting = self._waiting.setdefault(pair, deque())
        free = 0 if waiting else max(0, self.lanes - self._busy.get(pair, 0))
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
        waiting, out = self._waiting.get(pair), []
        while waiting and self._busy[pair] < self.lanes:
            shard = waiting.popleft()
            if keep(shard):
                out.append(shard)
                self._busy[pair] += 1
        return out
