"""Prometheus metrics of the controller (prometheus-client), on their own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.congestion = Gauge("netkv_tier_congestion", "Per-tier congestion c_tier (non-KV "
                                "utilisation), the oracle's value", ["tier"], registry=r)
        self.link_util = Gauge("netkv_link_utilisation", "Egress utilisation against the "
                               "configured rate, per traffic class", ["link", "interface",
                               "tier", "class"], registry=r)
        self.class_bytes = Counter("netkv_class_bytes", "Bytes sent per traffic class "
                                   "(tc HTB class counters)", ["interface", "class"], registry=r)
        self.class_drops = Counter("netkv_class_drops", "Packets dropped per traffic class",
                                   ["interface", "class"], registry=r)
        self.port_bytes = Gauge("netkv_port_bytes", "OpenFlow port counters", ["switch", "port",
                                "direction"], registry=r)
        self.poll_latency = Histogram("netkv_poll_latency_seconds", "Time to read all "
                                      "counters once", registry=r,
                                      buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
        self.oracle_age = Gauge("netkv_oracle_age_seconds", "Age of the oracle's congestion "
                                "data", registry=r)
        self.intents = Counter("netkv_transfer_intents", "TransferIntents received", registry=r)
        self.links_down = Gauge("netkv_links_down", "Fabric links currently down", registry=r)

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)
