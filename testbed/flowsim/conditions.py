"""What happens to the fluid network's links from outside its flows: a link failed or
restored, background traffic offered, a flow's priority level changed; and the
congestion each tier shows the oracle."""

from __future__ import annotations

from collections import defaultdict

from testbed.flowsim.links import MAX_BACKGROUND, Flow, Hop


class LinkConditions:
    """FluidNetwork's link faults, background traffic and priority levels."""

    # -- failures --------------------------------------------------------------------
    def set_link(self, a: str, b: str, up: bool, now: float) -> int:
        """A link fails or returns; flows on a failed link move to a live equal-cost
        path of theirs where one exists. Returns how many flows moved."""
        self._clock(now)
        for hop in ((a, b), (b, a)):
            self._links_down += (not up) - self.links[hop].down
            self.links[hop].down = not up
            self.links[hop].refresh()
        moved = 0
        if not up:
            for flow in self.flows.values():
                if any(self.links[h].down for h in flow.path):
                    src, dst = flow.path[0][0], flow.path[-1][1]
                    live = [p for p in self.live_paths(src, dst)
                            if not any(self.links[h].down for h in p)]
                    if live:
                        self._set_path(flow, live[flow.flow_id % len(live)])
                        moved += 1
        self.recompute()
        return moved

    # -- background ------------------------------------------------------------------
    def set_background(self, fractions: dict[Hop, float], now: float) -> None:
        self._clock(now)
        for hop, f in fractions.items():
            link = self.links[hop]
            link.settle(now)
            link.background = min(max(f, 0.0), MAX_BACKGROUND)
            link.refresh()
        self.recompute()

    def tier_congestion(self) -> dict[int, float]:
        """c_tier: mean background (non-KV) utilisation over the tier's links."""
        sums: dict[int, list[float]] = defaultdict(list)
        for link in self.links.values():
            sums[link.tier].append(link.background)
        return {tier: min(sum(v) / len(v), 0.99) for tier, v in sums.items()}

    def set_level(self, flow: Flow, level: int, now: float) -> None:
        """A flow changes priority level (MFS promotes at layer boundaries)."""
        if flow.level != level:
            self._clock(now)
            self._settle(flow)
            self._leveled += (level != 0) - (flow.level != 0)
            flow.level = level
            self.recompute(flow.path)
