"""What the flow engine's network shows: background traffic offered per link over time,
the oracle refreshed on its period, and link utilisation sampled for links.csv."""

from __future__ import annotations

import random
from typing import Protocol

import numpy as np

from testbed.control.network_seam import SimulatedNetwork
from testbed.flowsim.events import EventLoop
from testbed.model.oracle import Oracle
from testbed.records import LinkSamples
from testbed.scenario import Scenario
from testbed.workloads.build import Workload

LINK_SAMPLE_S = 1.0


class TelemetryHost(Protocol):
    """What NetworkTelemetry uses of the class it is mixed into (FlowSimulation)."""

    scenario: Scenario
    workload: Workload
    loop: EventLoop
    net: SimulatedNetwork
    rng: random.Random  # the background's jitter
    bg_override: dict[int, float]  # tier -> a background fault's fraction
    controller_back_at: float  # the oracle does not refresh before this
    links: LinkSamples  # links.csv
    _oracle: Oracle
    _horizon: float  # the end of the measured window (set when the run starts)
    _last_sample: tuple[np.ndarray, np.ndarray]  # link_bytes() at the last sample
    _sample_bytes: np.ndarray  # what each link carries in a sample period at capacity

    def _reschedule_network(self) -> None: ...


class NetworkTelemetry:
    """FlowSimulation's background, oracle refresh and link samples (its host: a
    TelemetryHost)."""

    def _background(self) -> None:
        """Background offered per link (the fluid engine's: its network is a
        FluidBackground; Ns3Simulation sends streams instead)."""
        bg = self.scenario.network.background
        fractions = {}
        for hop, link in self.net.links.items():
            f = self.bg_override.get(link.tier, bg.fraction(link.tier))
            if bg.jitter and f:
                f *= 1.0 + bg.jitter * self.rng.uniform(-1.0, 1.0)
            fractions[hop] = f
        self.net.set_background(fractions, self.loop.now)
        self._reschedule_network()

    def _background_loop(self) -> None:
        self._background()
        bg = self.scenario.network.background
        if bg.jitter and any(bg.fraction(t) for t in (1, 2, 3)):
            self.loop.after(bg.change_s, self._background_loop)

    def _refresh_oracle(self) -> None:
        if self.loop.now >= self.controller_back_at:  # a stopped controller serves nothing
            self._oracle = self._oracle.with_congestion(self.net.tier_congestion(),
                                                        self.loop.now)
        self.loop.after(self.scenario.oracle.refresh_s, self._refresh_oracle)

    def _sample_links(self) -> None:
        now = self.loop.now
        self.net.advance(now)
        measured = self.workload.warmup_s <= now - LINK_SAMPLE_S and now <= self._horizon
        kv, bg = self.net.link_bytes()
        kv0, bg0 = self._last_sample
        self.links.add(round(now, 6), measured, (kv - kv0) / self._sample_bytes,
                       (bg - bg0) / self._sample_bytes)
        self._last_sample = (kv, bg)
        self.loop.after(LINK_SAMPLE_S, self._sample_links)
