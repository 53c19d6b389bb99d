"""What the controller knows, shared between its OpenFlow, HTTP and metrics threads."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from testbed.model.oracle import Oracle, TransferIntent
from testbed.topologies.fabric import Fabric

MAX_INTENTS = 10_000
MAX_INTENT_BYTES = 4 * 2**20


def _size(intent: TransferIntent) -> int:
    return len(intent.request_id) + len(intent.src) + len(intent.dst) + 64


@dataclass
class ControllerState:
    fabric: Fabric
    lock: threading.Lock = field(default_factory=threading.Lock)
    connected: set[str] = field(default_factory=set)
    ready: set[str] = field(default_factory=set)  # routes installed and barrier answered
    down_links: set[str] = field(default_factory=set)
    congestion: dict[int, float] = field(default_factory=dict)
    generated_at: float | None = None  # wall clock of the last telemetry poll
    polls: int = 0
    intents: deque[TransferIntent] = field(default_factory=deque)  # the latest, bounded
    intents_total: int = 0
    intents_bytes: int = 0
    link_utilisation: dict[str, dict[str, float]] = field(default_factory=dict)

    def oracle(self) -> Oracle:
        spec = self.fabric.spec
        with self.lock:
            return Oracle(
                tier_map=dict(spec.tier_map),
                tier_bandwidth_gbps=spec.tier_bandwidth_gbps,
                tier_latency_us=spec.tier_latency_us,
                congestion=dict(self.congestion),
                generated_at=self.generated_at or 0.0,
            )

    def store_intent(self, intent: TransferIntent) -> None:
        """Keep the latest intents, at most MAX_INTENTS and MAX_INTENT_BYTES of them."""
        with self.lock:
            self.intents.append(intent)
            self.intents_total += 1
            self.intents_bytes += _size(intent)
            while len(self.intents) > MAX_INTENTS or self.intents_bytes > MAX_INTENT_BYTES:
                self.intents_bytes -= _size(self.intents.popleft())

    def age_s(self) -> float | None:
        with self.lock:
            return None if self.generated_at is None else max(0.0, time.time() - self.generated_at)

    def status(self) -> dict:
        with self.lock:
            return {
                "switches_expected": len(self.fabric.switches),
                "switches_connected": len(self.connected),
                "switches_ready": len(self.ready),
                "ready": len(self.ready) == len(self.fabric.switches) and self.polls > 0,
                "polls": self.polls,
                "down_links": sorted(self.down_links),
            }
