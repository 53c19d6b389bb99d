"""What DCQCN does to a transfer that a fluid share does not: the sending a cut costs.

On a congestion notification a QP's rate drops by alpha/2 of itself (Zhu et al., SIGCOMM
2015); from then every increase event (a rate-timer period, or the byte counter's bytes
if they come first) sets it halfway to its target, which is the rate it was cut from or
above. So the deficit halves every event and the QP sends alpha/2 x P x (1 + 1/2 + ...)
= alpha x P of its rate's bytes fewer than a fluid share that is back at once: a cut
costs it one event period P of sending at full alpha. The replica keeps every byte of a
transfer scaled and its duration real; with DCQCN's timers slowed by 1/scale its loop is
1/scale slower against the transfers than the real fabric's, which short transfers pay.
"""

from __future__ import annotations


def increase_period_s(rate_timer_s: float, byte_counter_bytes: float, rate: float) -> float:
    """Time between increase events sending at `rate` (bytes/s): the timer or the byte
    counter, whichever fires first."""
    return min(rate_timer_s, byte_counter_bytes / rate)


def cut_cost_s(period_s: float, alpha: float = 1.0) -> float:
    """Sending time a QP loses to one cut and the recovery after it (alpha: DCQCN's
    estimate of congestion when cut; 1 at a QP's first)."""
    return alpha * period_s


def validity_floor(rate: float, replica_cost_s: float, cluster_cost_s: float,
                   tolerance: float) -> float:
    """Smallest shard (bytes, sent at `rate` bytes/s) whose replica pays for a cut at
    most `tolerance` of its fluid time more than the cluster does."""
    return rate * max(0.0, replica_cost_s - cluster_cost_s) / tolerance
