"""Real time for worker processes: one run clock, and an event loop on it.

Every worker of a run shares t0 (wall-clock epoch of the run's time zero) and the time
dilation D. Modelled time is (wall - t0) / D: with D > 1 the fabric runs D times slower
and every compute delay is stretched by D, so records divided back by D are in the
modelled cluster's seconds. RealTimeLoop offers the flow simulator's EventLoop interface
(`now`, `at`, `after`) on that clock, so the serving classes run unchanged in a worker;
callbacks run on one thread, and other threads hand work in with `post`.
"""

from __future__ import annotations

import heapq
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

CLOCK_PROBES = 5  # round trips per worker on another machine; the fastest one counts


def clock_sample(sent: float, their_wall: float, received: float) -> tuple[float, float]:
    """One round trip to another machine's worker: (round-trip time, its clock minus
    ours), taking its reading as made halfway (NTP's estimate). The error is at most half
    the round trip, whatever delays a loaded machine adds, so the fastest of a few
    probes is kept; a one-way stamp (a hello's) would carry the whole delay instead."""
    return received - sent, their_wall - (sent + received) / 2


@dataclass(frozen=True)
class RunClock:
    t0: float  # wall-clock epoch (time.time()) of modelled time zero
    dilation: float = 1.0

    def now(self) -> float:
        return (time.time() - self.t0) / self.dilation

    def wall(self, modelled: float) -> float:
        return self.t0 + modelled * self.dilation

    def to_modelled(self, wall: float) -> float:
        return (wall - self.t0) / self.dilation

    def span(self, wall_s: float) -> float:
        """A wall-clock duration in modelled seconds."""
        return wall_s / self.dilation

    def sleep_until(self, modelled: float, stop: threading.Event | None = None) -> bool:
        """Sleep until modelled time; False when `stop` was set first."""
        delay = self.wall(modelled) - time.time()
        if delay <= 0:
            return True
        if stop is None:
            time.sleep(delay)
            return True
        return not stop.wait(delay)


class RealTimeLoop:
    """Timers and posted callbacks, run one at a time on the calling thread."""

    def __init__(self, clock: RunClock):
        self.clock = clock
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = count()
        self._inbox: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._stopped = False
        self.processed = 0

    @property
    def now(self) -> float:
        return self.clock.now()

    def at(self, time_s: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time_s, next(self._seq), callback))

    def after(self, delay: float, callback: Callable[[], None]) -> None:
        self.at(self.now + delay, callback)

    def post(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the loop thread as soon as possible (thread-safe)."""
        self._inbox.put(callback)

    def stop(self) -> None:
        """Thread-safe: the loop returns after the callback it is running."""
        self._stopped = True
        self._inbox.put(None)

    def run(self) -> None:
        while not self._stopped:
            wall = time.time()
            if self._timers and self.clock.wall(self._timers[0][0]) <= wall:
                _, _, job = heapq.heappop(self._timers)  # due timers first: never starved
            else:
                timeout = self.clock.wall(self._timers[0][0]) - wall if self._timers else None
                try:
                    job = self._inbox.get(timeout=timeout)
                except queue.Empty:
                    continue
                if job is None:
                    continue
            job()
            self.processed += 1
