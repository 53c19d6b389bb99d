"""Utilisation and per-tier congestion (the oracle's c_tier) from class byte counters: pure,
and one function for every packet engine (the SDN controller's poller, the ns-3 engine).

Utilisation is computed against the *configured* (emulated) link rate: OVS reports a
fake 10 Gbps port speed whatever tc does. Congestion c_tier, as the paper defines it,
excludes the KV class: it is the mean over the tier's egress interfaces of the non-KV
utilisation, clamped to [0, 0.99].
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

MAX_CONGESTION = 0.99


@dataclass(frozen=True)
class InterfaceRate:
    interface: str
    link: str
    tier: int
    rate_bps: float  # configured
    bps_by_class: dict[str, float]

    def utilisation(self, cls: str) -> float:
        return self.bps_by_class.get(cls, 0.0) / self.rate_bps

    @property
    def total_utilisation(self) -> float:
        return sum(self.bps_by_class.values()) / self.rate_bps

    @property
    def external_utilisation(self) -> float:
        """Everything but the scheduler's own KV flows."""
        return sum(v for k, v in self.bps_by_class.items() if k != "kv") / self.rate_bps


def rates(prev: dict[str, dict[str, int]], cur: dict[str, dict[str, int]], dt: float
          ) -> dict[str, float]:
    """Bits per second per class between two byte-counter readings (resets read as 0)."""
    if dt <= 0:
        raise ValueError("dt must be positive")
    out = {}
    for cls, counters in cur.items():
        before = prev.get(cls, {}).get("bytes", 0)
        delta = counters["bytes"] - before
        out[cls] = max(delta, 0) * 8 / dt
    return out


def tier_congestion(samples: list[InterfaceRate]) -> dict[int, float]:
    by_tier: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        by_tier[s.tier].append(s.external_utilisation)
    return {t: min(max(sum(v) / len(v), 0.0), MAX_CONGESTION) for t, v in sorted(by_tier.items())}
