"""Wall-clock and modelled time: the one place that converts between them.

A packet-level run plays the modelled cluster D times slower (emulation.time_dilation):
the fabric's links run at the modelled rate x scale / D, every compute delay and timer is
stretched by D, and records divided back by D are in the modelled cluster's seconds.
`Dilation` converts spans and rates; `RunClock` adds the run's wall-clock epoch t0, which
every worker of a run shares, to convert instants.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Dilation:
    factor: float = 1.0  # wall seconds per modelled second

    def wall(self, modelled_s: float) -> float:
        """A modelled span in wall seconds."""
        return modelled_s * self.factor

    def modelled(self, wall_s: float) -> float:
        """A wall span in modelled seconds."""
        return wall_s / self.factor

    def wall_rate(self, per_modelled_s: float) -> float:
        """A modelled rate (bytes, bits, events per modelled second) per wall second."""
        return per_modelled_s / self.factor

    def modelled_rate(self, per_wall_s: float) -> float:
        """A rate on the slowed fabric (per wall second) per modelled second."""
        return per_wall_s * self.factor

    def slower(self, m: float) -> Dilation:
        """This dilation m times slower (a setting to try)."""
        return Dilation(self.factor * m)


@dataclass(frozen=True)
class RunClock:
    t0: float  # wall-clock epoch (time.time()) of modelled time zero
    dilation: float = 1.0

    @property
    def spans(self) -> Dilation:
        return Dilation(self.dilation)

    def now(self) -> float:
        return self.to_modelled(time.time())

    def wall(self, modelled: float) -> float:
        """The wall-clock epoch of a modelled instant."""
        return self.t0 + self.spans.wall(modelled)

    def to_modelled(self, wall: float) -> float:
        """The modelled instant of a wall-clock epoch."""
        return self.spans.modelled(wall - self.t0)

    def span(self, wall_s: float) -> float:
        """A wall-clock duration in modelled seconds."""
        return self.spans.modelled(wall_s)

    def sleep_until(self, modelled: float, stop: threading.Event | None = None) -> bool:
        """Sleep until modelled time; False when `stop` was set first."""
        delay = self.wall(modelled) - time.time()
        if delay <= 0:
            return True
        if stop is None:
            time.sleep(delay)
            return True
        return not stop.wait(delay)
