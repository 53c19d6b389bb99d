"""Calibration math (pure): what a tier's links really deliver to a KV transfer.

Lone transfers of several sizes over a tier-k pair give (bytes, seconds) samples; a
least-squares line seconds = bytes / (f x B_k) + c yields the capacity factor f (what
fraction of the configured rate the packets achieve: headers, HTB, TCP) and the fixed
cost c per transfer (connection set-up, slow start, the final acknowledgement). The flow
model takes f per link tier (network.capacity_factor). A retransmission timeout adds a
lump of silence (200 ms, a large transfer's whole time on the replica) to a sample now
and then, never takes any away: the line goes through each size's fastest repeat, and f
is capped at the share of the wire a payload byte can have (`fit_capacity`). The fixed
cost is what the TCP terms model (testbed/model/tcp.py); `fit_tcp` fits their one free
parameter, the replica's per-hop delay, to the same lone transfers, from 3 decades of
sizes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from testbed.model.tcp import MAX_CONTENTION_IDLE, MAX_SHARD_SPREAD, lone_shard_ends


@dataclass(frozen=True)
class TierFit:
    tier: int
    factor: float  # achieved / configured rate on the tier's bottleneck links
    overhead_s: float  # fixed cost per transfer
    samples: int
    r2: float
    fitted: float | None = None  # the line's factor before the wire's cap (fit_capacity)


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


def lower_envelope(samples: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Each size's fastest sample: what the links deliver when no timeout stalled them."""
    best: dict[float, float] = {}
    for size, secs in samples:
        best[size] = min(secs, best.get(size, math.inf))
    return sorted(best.items())


def fit_capacity(tier: int, samples: Sequence[tuple[float, float]], tier_bytes_per_s: float,
                 payload_share: float) -> TierFit:
    """fit_tier on each size's fastest repeat, the factor at most `payload_share` (the
    payload's share of a full frame on this engine's wire: no link delivers more). A
    timeout in the one sample of a mid size tilts the line and can put f over the wire's
    rate (1.04-1.08 on ns-3's replica, where nearly every shard meets one); the cap keeps
    the rate physical, and the timeouts are the TCP terms' and the packets' to show."""
    if not 0.0 < payload_share <= 1.0:
        raise ValueError(f"payload_share must be in (0, 1], not {payload_share}")
    fit = fit_tier(tier, lower_envelope(samples), tier_bytes_per_s)
    return TierFit(fit.tier, min(fit.factor, payload_share), fit.overhead_s, len(samples),
                   fit.r2, fitted=fit.factor)


def capacity_factors(fits: Sequence[TierFit]) -> dict[int, float]:
    return {f.tier: round(f.factor, 4) for f in fits}


SERIALISATION_GRID = tuple(k / 20 for k in range(21))


def fit_tcp(samples: Sequence[tuple[int, float, float]],
            predict: Callable[[float, float, int, float], float],
            max_hop_delay_s: float = 2e-3) -> dict:
    """Fit the replica's two TCP terms the scaling does not fix to lone transfers of many
    sizes: the share of store-and-forward time its shapers charge per hop (HTB's burst
    hides some) and a per-hop delay (wall seconds: software switching). `samples` are
    (tier, modelled bytes, modelled seconds); `predict(serialisation, hop_delay_s, tier,
    bytes)` is the TCP flow model's time. Least squares on relative error: a grid over
    the share, golden-section search over the delay for each. Returns both, with the
    residuals."""
    if not samples:
        raise ValueError("no samples to fit")

    def cost(share: float, d: float) -> float:
        return sum(((predict(share, d, t, b) - s) / s) ** 2 for t, b, s in samples)

    def best_delay(share: float) -> float:
        grid = [0.0] + [max_hop_delay_s * 2.0 ** -k for k in range(12, -1, -1)]
        i = min(range(len(grid)), key=lambda i: cost(share, grid[i]))
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        ratio = (math.sqrt(5) - 1) / 2
        for _ in range(30):
            a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
            if cost(share, a) <= cost(share, b):
                hi = b
            else:
                lo = a
        mid = (lo + hi) / 2
        return mid if cost(share, mid) <= cost(share, grid[i]) else grid[i]

    fits = [(share, best_delay(share)) for share in SERIALISATION_GRID]
    share, delay = min(fits, key=lambda f: cost(*f))
    residuals = [{"tier": t, "bytes": b, "seconds": s,
                  "tcp_error": (predict(share, delay, t, b) - s) / s} for t, b, s in samples]
    return {"serialisation": share, "hop_delay_s": delay, "residuals": residuals,
            "median_abs_error": statistics.median(abs(r["tcp_error"]) for r in residuals)}


CAPACITY_FIT_MIN_GB = 0.5  # the capacity factor is fitted where start-up is negligible
SPREAD_GRID = [round(0.005 * i, 3) for i in range(int(MAX_SHARD_SPREAD / 0.005) + 1)]


def fit_shard_spread(transfers: Sequence[tuple[list[float], float]]) -> dict:
    """The TCP model's shard spread (tcp.shard_share) from lone transfers: each is (its
    shards' end times, the tier's fixed cost per transfer), seconds from the transfer's
    start. Once the fixed cost is taken off, each transfer's shard ends as shares of its
    slowest are set against the model's (tcp.lone_shard_ends): the spread that fits them
    best (least squares, on a grid of 0.005), and the median over transfers. Every shard
    counts, not only the fastest, which alone is the noisiest (the ratio slowest /
    fastest, kept for the report, fitted 0.33-0.54 in two calibrations of one fabric
    where this fits 0.31-0.34)."""
    ratios, estimates = [], []
    profiles: dict[int, list[list[float]]] = {}
    for ends, fixed in transfers:
        c = max(fixed, 0.0)
        if len(ends) < 2 or min(ends) <= c:
            continue
        seen = sorted(e - c for e in ends)
        ratios.append(seen[-1] / seen[0])
        shares = [e / seen[-1] for e in seen]
        model = profiles.setdefault(len(seen), [lone_shard_ends(len(seen), x)
                                                for x in SPREAD_GRID])
        errors = [sum((m - o) ** 2 for m, o in zip(prof, shares, strict=True))
                  for prof in model]
        estimates.append(SPREAD_GRID[errors.index(min(errors))])
    if not estimates:
        return {"shard_spread": 0.0, "ratios": [], "spread_estimates": []}
    return {"shard_spread": round(statistics.median(estimates), 4), "ratios": ratios,
            "spread_estimates": estimates}


def lone_spread(tiers: dict) -> dict:
    """fit_shard_spread on a calibration's lone transfers where start-up is negligible,
    as for the capacity factor (`tiers` as a calibration records them); nothing if it
    recorded no shards' ends (the spread it has stays)."""
    lone = [(d["shards"], t["overhead_s"]) for t in tiers.values()
            for d in t.get("samples", []) + t.get("spread_samples", [])
            if d["bytes"] >= CAPACITY_FIT_MIN_GB * 1e9 and d.get("shards")]
    if not lone:
        return {}
    got = fit_shard_spread(lone)
    return {"shard_spread": got["shard_spread"], "shard_ratios": got["ratios"],
            "spread_estimates": got["spread_estimates"]}


def fit_contention(probes: Sequence[tuple[float, Callable[[float], float]]]) -> dict:
    """The TCP model's contention delay (tcp.contention_delay) from competing probes: each is
    (the slowest transfer's measured end, the model's last end as a function of the idle
    share). Per probe the idle share whose last end matches the measured one (bisection:
    a slower link only ends later; 0 if the model is already late, the bound if even it
    is early); the median over probes is fitted, so one stalled probe does not set it."""
    estimates = [_matching(measured, last_end, MAX_CONTENTION_IDLE)
                 for measured, last_end in probes]
    if not estimates:
        return {"contention_idle": 0.0, "contention_estimates": []}
    return {"contention_idle": round(statistics.median(estimates), 4),
            "contention_estimates": [round(e, 4) for e in estimates]}


def fit_join_stall(probes: Sequence[tuple[float, Callable[[float], float], float]]) -> dict:
    """The TCP model's join stall (tcp.join_stall) from staggered probes: each is (the
    first arrival's measured time, the model's as a function of the stall, and the
    largest stall worth trying: the probe's span). A newcomer's silence leaves the link to
    the incumbent, so the first arrival ends sooner the longer the stall (while the link
    stays busy the last one ends when it would have anyway); per probe the stall at which
    it ends when the packets' did (bisection), and the median over probes is fitted."""
    estimates = [_first_matching(measured, model, top) for measured, model, top in probes]
    if not estimates:
        return {"join_stall_s": 0.0, "join_stall_estimates": []}
    return {"join_stall_s": round(statistics.median(estimates), 6),
            "join_stall_estimates": [round(e, 6) for e in estimates]}


def _first_matching(measured: float, model: Callable[[float], float], top: float) -> float:
    """The least stall in [0, top] at which the decreasing `model` (the first arrival's
    time) comes down to `measured`. It stops decreasing once the first arrival has the
    link to itself until it ends, so a measurement at or below that floor gives the stall
    where the floor begins: more is not in the data."""
    floor = model(top)
    target = max(measured, floor + 1e-9 * abs(floor))
    return _matching(-target, lambda x: -model(x), top)


def _matching(measured: float, model: Callable[[float], float], top: float) -> float:
    """The x in [0, top] at which the increasing `model` gives `measured` (bisection; 0 if
    the model is already over it, `top` if even that is under)."""
    lo, hi = 0.0, top
    if model(lo) >= measured:
        return lo
    if model(hi) <= measured:
        return hi
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model(mid) < measured else (lo, mid)
    return (lo + hi) / 2
