"""The network cost oracle (NetKV III-E): the only thing the operator tells the scheduler.

Four maps plus the time they were generated. Bandwidths are in the modelled cluster's
units (Gbps), never the emulation's scaled ones.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from testbed.model.cost import gbps_to_bytes_per_s, us_to_s


@dataclass(frozen=True)
class Oracle:
    tier_map: Mapping[tuple[str, str], int]  # a dict, or topologies' lazy TierMap
    tier_bandwidth_gbps: dict[int, float]
    tier_latency_us: dict[int, float]
    congestion: dict[int, float] = field(default_factory=dict)
    generated_at: float = 0.0

    def __post_init__(self) -> None:
        _check_congestion(self.congestion)
        present = getattr(self.tier_map, "tiers_present", None)  # a TierMap lists no pairs
        for tier in present() if present else set(self.tier_map.values()):
            if tier not in self.tier_bandwidth_gbps:
                raise ValueError(f"tier {tier} appears in tier_map but has no bandwidth")

    def tier(self, src: str, dst: str) -> int:
        return self.tier_map[(src, dst)]

    def with_tiers(self, extra: dict[tuple[str, str], int]) -> Oracle:
        """The same oracle knowing more pairs (a decode node doing prefill work: FlowKV)."""
        return replace(self, tier_map={**self.tier_map, **extra})

    def bandwidth(self, tier: int) -> float:
        """Static tier bandwidth in bytes/s."""
        return gbps_to_bytes_per_s(self.tier_bandwidth_gbps[tier])

    def latency(self, tier: int) -> float:
        return us_to_s(self.tier_latency_us.get(tier, 0.0))

    def congestion_of(self, tier: int) -> float:
        return self.congestion.get(tier, 0.0)

    def age(self, now: float) -> float:
        return max(0.0, now - self.generated_at)

    def with_congestion(self, congestion: dict[int, float], generated_at: float) -> Oracle:
        """The same maps with a new congestion reading: only the reading is checked again
        (a simulator takes one per telemetry tick; re-reading the tier map cost ~80 us)."""
        congestion = dict(congestion)
        _check_congestion(congestion)
        fresh = copy.copy(self)
        object.__setattr__(fresh, "congestion", congestion)
        object.__setattr__(fresh, "generated_at", generated_at)
        return fresh

    def to_dict(self) -> dict:
        """JSON-ready form: tier_map as [src, dst, tier] rows (JSON has no tuple keys)."""
        return {
            "tier_map": [[s, d, t] for (s, d), t in sorted(self.tier_map.items())],
            "tier_bandwidth": {str(k): v for k, v in self.tier_bandwidth_gbps.items()},
            "tier_latency": {str(k): v for k, v in self.tier_latency_us.items()},
            "congestion": {str(k): v for k, v in self.congestion.items()},
            "generated_at": self.generated_at,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Oracle:
        try:
            return cls(
                tier_map={(s, d): int(t) for s, d, t in data["tier_map"]},
                tier_bandwidth_gbps={int(k): float(v) for k, v in data["tier_bandwidth"].items()},
                tier_latency_us={int(k): float(v) for k, v in data["tier_latency"].items()},
                congestion={int(k): float(v) for k, v in data.get("congestion", {}).items()},
                generated_at=float(data.get("generated_at", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed oracle document: {exc}") from exc


@dataclass(frozen=True)
class TransferIntent:
    """What the scheduler may tell the operator about a KV transfer it is about to start."""

    request_id: str
    src: str
    dst: str
    size_bytes: int
    priority: int = 0

    def __post_init__(self) -> None:
        if self.size_bytes < 0:
            raise ValueError(f"size_bytes must be >= 0, got {self.size_bytes}")
        if self.src == self.dst:
            raise ValueError("src and dst must differ")

    def to_dict(self) -> dict:
        return {
            "request_id": self.request_id,
            "src": self.src,
            "dst": self.dst,
            "size_bytes": self.size_bytes,
            "priority": self.priority,
        }

    @classmethod
    def from_dict(cls, data: dict) -> TransferIntent:
        try:
            return cls(
                request_id=str(data["request_id"]),
                src=str(data["src"]),
                dst=str(data["dst"]),
                size_bytes=int(data["size_bytes"]),
                priority=int(data.get("priority", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed TransferIntent: {exc}") from exc


def _check_congestion(congestion: Mapping[int, float]) -> None:
    for tier, c in congestion.items():
        if not 0.0 <= c < 1.0:
            raise ValueError(f"congestion[{tier}] must be in [0, 1), got {c}")
