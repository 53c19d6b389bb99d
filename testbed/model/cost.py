"""NetKV network and queueing cost model (eqs. 3, 4, 6, 7) and the paper's two propositions.

Units: bytes, bytes per second, seconds. Oracle figures arrive in Gbps and
microseconds; `gbps_to_bytes_per_s` and `us_to_s` convert them once, here.
"""

from __future__ import annotations

import numpy as np


def gbps_to_bytes_per_s(gbps: float) -> float:
    return gbps * 1e9 / 8.0


def us_to_s(us: float) -> float:
    return us * 1e-6


def effective_bandwidth(tier_bandwidth: float, congestion: float, n_inflight: int) -> float:
    """B_eff = B_tier * (1 - c_tier) / (1 + n_inflight) (eq. 4).

    (1 - c) is the residual bandwidth left by traffic external to the scheduler;
    1/(1 + n) is the max-min share among the scheduler's own in-flight transfers
    from the same prefill instance on that tier, plus the new one.
    """
    if not 0.0 <= congestion < 1.0:
        raise ValueError(f"congestion must be in [0, 1), got {congestion}")
    if n_inflight < 0:
        raise ValueError(f"n_inflight must be >= 0, got {n_inflight}")
    return tier_bandwidth * (1.0 - congestion) / (1.0 + n_inflight)


def transfer_time(size_bytes: float, bandwidth: float, latency_s: float) -> float:
    """T_transfer = s / B_eff + L_tier (eq. 3)."""
    if (bandwidth.min() if isinstance(bandwidth, np.ndarray) else bandwidth) <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    return size_bytes / bandwidth + latency_s


def queue_delay(queued: int, batch: int, beta_max: int, iteration_time: float) -> float:
    """T_queue = max(0, q_d - (beta_max - beta_d)) * t_iter(beta_d) (eq. 6).

    A request joins at the next iteration boundary if a slot is free; otherwise it waits
    one iteration per blocked predecessor.
    """
    excess = queued - (beta_max - batch)
    return (np.maximum(excess, 0) if isinstance(excess, np.ndarray) else max(0, excess)) \
        * iteration_time


def first_decode_time(iteration_time_after_join: float) -> float:
    """T_decode = t_iter(beta_d + 1) (eq. 7); the caller evaluates t_iter at beta_d + 1."""
    return iteration_time_after_join


def near_instance_wins(
    hit_near: float,
    hit_far: float,
    bandwidth_ratio: float,
    congestion_near: float,
    congestion_far: float,
    near_bandwidth: float = 1.0,
    size_bytes: float = 1.0,
    queue_near: float = 0.0,
    queue_far: float = 0.0,
) -> bool:
    """Proposition 1 (eq. 8): does the same-rack, colder instance beat the cross-pod, warmer one?

    (1 - rho1) < k * (1 - c1)/(1 - c3) * (1 - rho2) + B1 (1 - c1) / s * (Tq(d2) - Tq(d1)).
    """
    lhs = 1.0 - hit_near
    rhs = bandwidth_ratio * (1.0 - congestion_near) / (1.0 - congestion_far) * (1.0 - hit_far)
    rhs += near_bandwidth * (1.0 - congestion_near) / size_bytes * (queue_far - queue_near)
    return lhs < rhs


def staleness_tolerance(
    fast_bandwidth: float, fast_congestion: float, slow_bandwidth: float, slow_congestion: float
) -> float:
    """Proposition 2 (eq. 9): the largest congestion error that cannot invert two tiers' ranking.

    Negative means no tolerance: the faster tier is already slower after congestion.
    """
    gap = fast_bandwidth * (1.0 - fast_congestion) - slow_bandwidth * (1.0 - slow_congestion)
    return gap / (fast_bandwidth + slow_bandwidth)
