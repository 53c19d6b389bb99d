"""The telemetry poller (as Faucet's Gauge is to its controller): tc class counters of
every switch egress, turned into per-link utilisation, tier congestion (the oracle) and
Prometheus metrics. Reading the counters is the only I/O; `update` is the logic."""

from __future__ import annotations

import time

from testbed.datapath import tc
from testbed.model.congestion import InterfaceRate, rates, tier_congestion
from testbed.topologies.placement import interface_netns

CLASS_NAMES = ("control", "kv", "background")


class Poller:
    def __init__(self, fabric, state, metrics, daemons: int = 0, read=None):
        """`read(names)`: the counters of those switch ports, tc.all_counters' mapping;
        this machine's by default (a cluster run passes one that asks every server)."""
        self.state, self.metrics = state, metrics
        self.egress = [(n, i, link) for n, i, link in fabric.egress_interfaces()
                       if n in fabric.switches]
        netns = interface_netns(fabric, daemons)
        self.read = read or (lambda names: tc.all_counters(names, netns=netns))
        self._prev: dict[str, dict[str, dict[str, int]]] = {}
        self._prev_t: float | None = None
        self._intents_seen = 0

    def poll(self) -> None:
        t0 = time.perf_counter()
        self.update(self.read([intf for _, intf, _ in self.egress]), time.time())
        self.metrics.poll_latency.observe(time.perf_counter() - t0)

    def update(self, counters: dict, now: float) -> None:
        """Counters (interface -> class -> bytes, drops) read at `now`: rates since the
        last read, into the shared state and the metrics."""
        metrics = self.metrics
        samples = []
        if self._prev_t is not None:
            dt = now - self._prev_t
            for node, intf, link in self.egress:
                if intf not in counters or intf not in self._prev:
                    continue
                bps = rates(self._prev[intf], counters[intf], dt)
                samples.append(InterfaceRate(intf, f"{node}>{link.peer_of(node)}",
                                             link.tier, link.rate_bps, bps))
                for cls, counts in counters[intf].items():
                    before = self._prev[intf].get(cls, {})
                    metrics.class_bytes.labels(intf, cls).inc(
                        max(0, counts["bytes"] - before.get("bytes", 0)))
                    metrics.class_drops.labels(intf, cls).inc(
                        max(0, counts["drops"] - before.get("drops", 0)))
        self._prev, self._prev_t = counters, now
        if samples:
            congestion = tier_congestion(samples)
            util = {s.link: {c: s.utilisation(c) for c in CLASS_NAMES} for s in samples}
            with self.state.lock:
                self.state.congestion = congestion
                self.state.generated_at = now
                self.state.polls += 1
                self.state.link_utilisation = util
                down = len(self.state.down_links)
                intents = self.state.intents_total
            for tier, c in congestion.items():
                metrics.congestion.labels(str(tier)).set(c)
            for s in samples:
                for cls in CLASS_NAMES:
                    metrics.link_util.labels(s.link, s.interface, str(s.tier), cls).set(
                        s.utilisation(cls))
            metrics.links_down.set(down)
            metrics.intents.inc(intents - self._intents_seen)
            self._intents_seen = intents
        age = self.state.age_s()
        if age is not None:
            metrics.oracle_age.set(age)
