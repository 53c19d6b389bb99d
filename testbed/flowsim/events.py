"""A minimal discrete-event loop: a heap of (time, sequence, callback)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count


class EventLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = count()
        self.processed = 0

    def at(self, time: float, callback: Callable[[], None]) -> None:
        if time < self.now - 1e-12:
            raise ValueError(f"cannot schedule in the past: {time} < {self.now}")
        heapq.heappush(self._heap, (max(time, self.now), next(self._seq), callback))

    def after(self, delay: float, callback: Callable[[], None]) -> None:
        self.at(self.now + delay, callback)

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        """Process events in time order up to `until` or until `stop()` is true."""
        while self._heap and self._heap[0][0] <= until:
            if stop is not None and stop():
                return
            time, _, callback = heapq.heappop(self._heap)
            self.now = time
            callback()
            self.processed += 1
        if not (stop is not None and stop()):
            self.now = max(self.now, until) if not self._heap else self.now

    @property
    def pending(self) -> int:
        return len(self._heap)


class DrivenLoop(EventLoop):
    """An event loop beside a network that keeps its own clock (a packet simulator).

    Before each event the network is run up to the event's time; when something in it
    finishes on the way (`run_until` returns that instant instead of None) the loop's
    clock moves there and `on_network()` handles it, then the loop goes on. The network
    is run to `until` even with no event left, while it still holds work."""

    def __init__(self) -> None:
        super().__init__()
        self.run_until: Callable[[float], float | None] = lambda t: None
        self.on_network: Callable[[], None] = lambda: None

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        heap = self._heap
        while True:
            if stop is not None and stop():
                return
            due = heap[0][0] if heap else None
            horizon = until if due is None or due > until else due
            finished = self.run_until(horizon)
            if finished is not None:
                self.now = max(self.now, finished)
                self.on_network()
                self.processed += 1
                continue
            if due is None or due > until:
                break
            time, _, callback = heapq.heappop(heap)
            self.now = time
            callback()
            self.processed += 1
        if not heap:
            self.now = max(self.now, until)
