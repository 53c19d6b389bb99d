"""NetKV's self-contention counter: the scheduler's own KV transfers in flight, per
source and tier (the n_inflight of eq. 4)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class InflightCounter:
    """n_inflight[tier][p]: the scheduler's own KV transfers in flight, per source and tier.

    The true count is kept; reads are clamped to `cap` (the paper's default 16, about a
    NIC's saturated flow count) so sustained overload cannot run B_eff to zero.
    """

    cap: int = 16
    _counts: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))

    def get(self, tier: int, prefill: str) -> int:
        return min(self._counts[(tier, prefill)], self.cap)

    def raw(self, tier: int, prefill: str) -> int:
        return self._counts[(tier, prefill)]

    def increment(self, tier: int, prefill: str) -> None:
        self._counts[(tier, prefill)] += 1

    def snapshot(self, prefill: str) -> dict[int, int]:
        """The true counts of `prefill` on every tier (a guard restores them when a
        decision is thrown away)."""
        return {t: n for (t, p), n in self._counts.items() if p == prefill}

    def restore(self, prefill: str, counts: dict[int, int]) -> None:
        for key in [k for k in self._counts if k[1] == prefill]:
            del self._counts[key]
        for tier, n in counts.items():
            self._counts[(tier, prefill)] = n

    def decrement(self, tier: int, prefill: str) -> None:
        if self._counts[(tier, prefill)] <= 0:
            raise ValueError(f"transfer_done for ({tier}, {prefill}) with nothing in flight")
        self._counts[(tier, prefill)] -= 1
