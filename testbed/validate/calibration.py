"""Calibration math (pure): what a tier's links really deliver to a KV transfer.

Lone transfers of several sizes over a tier-k pair give (bytes, seconds) samples; a
least-squares line seconds = bytes / (f x B_k) + c yields the capacity factor f (what
fraction of the configured rate the packets achieve: headers, HTB, TCP) and the fixed
cost c per transfer (connection set-up, slow start, the final acknowledgement). The flow
model takes f per link tier (network.capacity_factor); c is reported, not modelled.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TierFit:
    tier: int
    factor: float  # achieved / configured rate on the tier's bottleneck links
    overhead_s: float  # fixed cost per transfer
    samples: int
    r2: float


def fit_tier(tier: int, samples: Sequence[tuple[float, float]], tier_bytes_per_s: float) -> TierFit:
    """samples: (modelled bytes, modelled seconds) of lone transfers at one tier."""
    if len(samples) < 2 or len({b for b, _ in samples}) < 2:
        raise ValueError(f"tier {tier}: need lone transfers of at least two sizes")
    xs = [b for b, _ in samples]
    ys = [s for _, s in samples]
    slope, intercept = statistics.linear_regression(xs, ys)
    if slope <= 0:
        raise ValueError(f"tier {tier}: transfer time does not grow with size; "
                         "the fabric was not carrying the probes")
    predicted = [slope * x + intercept for x in xs]
    mean = statistics.fmean(ys)
    ss_tot = sum((y - mean) ** 2 for y in ys)
    ss_res = sum((y - p) ** 2 for y, p in zip(ys, predicted, strict=True))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return TierFit(tier, 1.0 / (slope * tier_bytes_per_s), intercept, len(samples), r2)


def capacity_factors(fits: Sequence[TierFit]) -> dict[int, float]:
    return {f.tier: round(f.factor, 4) for f in fits}
