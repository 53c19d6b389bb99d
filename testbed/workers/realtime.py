"""Real time for worker processes: an event loop on the run's clock (testbed.clock).

RealTimeLoop offers the flow simulator's EventLoop interface
(`now`, `at`, `after`) on that clock, so the serving classes run unchanged in a worker;
callbacks run on one thread, and other threads hand work in with `post`. How late each
timer ran is recorded (testbed.workers.lateness) once `watch` is called.
"""

from __future__ import annotations

import heapq
import queue
import time
from collections.abc import Callable
from itertools import count

from testbed.clock import RunClock
from testbed.workers.lateness import PROBE_S, Lateness

CLOCK_PROBES = 5  # round trips per worker on another machine; the fastest one counts


def clock_sample(sent: float, their_wall: float, received: float) -> tuple[float, float]:
    """One round trip to another machine's worker: (round-trip time, its clock minus
    ours), taking its reading as made halfway (NTP's estimate). The error is at most half
    the round trip, whatever delays a loaded machine adds, so the fastest of a few
    probes is kept; a one-way stamp (a hello's) would carry the whole delay instead."""
    return received - sent, their_wall - (sent + received) / 2


class RealTimeLoop:
    """Timers and posted callbacks, run one at a time on the calling thread."""

    def __init__(self, clock: RunClock):
        self.clock = clock
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = count()
        self._inbox: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._stopped = False
        self.processed = 0
        self.lateness = Lateness()

    @property
    def now(self) -> float:
        return self.clock.now()

    def at(self, time_s: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time_s, next(self._seq), callback))

    def after(self, delay: float, callback: Callable[[], None]) -> None:
        self.at(self.now + delay, callback)

    def watch(self, probe_s: float = PROBE_S) -> None:
        """From now on (the run's start) record every timer's lateness, with a probe timer
        every `probe_s` wall seconds so that a quiet process is sampled too."""
        self.lateness.since = time.time()

        def probe() -> None:
            if not self._stopped:
                self.at(self.clock.to_modelled(time.time() + probe_s), probe)
        probe()

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
            if self._timers and (due := self.clock.wall(self._timers[0][0])) <= wall:
                _, _, job = heapq.heappop(self._timers)  # due timers first: never starved
                self.lateness.record(due, wall)
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
