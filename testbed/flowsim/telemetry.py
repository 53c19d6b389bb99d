"""What the flow engine's network shows: background traffic offered per link over time,
the oracle refreshed on its period, and link utilisation sampled for links.csv."""

from __future__ import annotations

LINK_SAMPLE_S = 1.0


class NetworkTelemetry:
    """FlowSimulation's background, oracle refresh and link samples."""

    def _background(self) -> None:
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
