"""Confidence in a verdict (pure): bootstrap intervals and the words a verdict uses.

One validation holds a few dozen requests per scheduler and seed, so a point error alone
says little: a percentile bootstrap (Efron & Tibshirani, ch. 13) gives each figure a 95%
interval, resampling the unit that is independent (a transfer for per-transfer errors; a
request, paired across both engines, for mean TTFT). Resampling is seeded: the same runs
give the same report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_REQUESTS = 20  # below this a mean-TTFT comparison is "inconclusive: n too small"
TTFT_TARGET = 0.05  # |mean TTFT error| a scheduler must stay within ...
TTFT_CI_BOUND = 0.10  # ... with both ends of its interval inside this
SEED = 20261123


@dataclass(frozen=True)
class Interval:
    point: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict:
        return {"point": self.point, "low": self.low, "high": self.high, "n": self.n}


def bootstrap(values, statistic: Callable[[np.ndarray], np.ndarray],
              resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Percentile interval of a statistic over resamples of `values`' rows (with
    replacement; a row may be a pair). `statistic` takes a (resamples, n, ...) array and
    reduces along axis 1."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    point = float(statistic(data[None, ...])[0])
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    stats = statistic(data[idx])
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return Interval(point, float(low), float(high), n)


def _abs_quantile(q: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda a: np.quantile(np.abs(a), q, axis=1)


def error_intervals(errors: Sequence[float]) -> dict:
    """Median and p90 of |error|, and the mean error (bias), each with its interval."""
    return {"median_abs_error": bootstrap(errors, _abs_quantile(0.5)).as_dict(),
            "p90_abs_error": bootstrap(errors, _abs_quantile(0.9)).as_dict(),
            "mean_error": bootstrap(errors, lambda a: a.mean(axis=1)).as_dict()}


def clustered_abs_quantile(values: Sequence[float], groups: Sequence[object], q: float,
                           resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """The q-quantile of |value| with its percentile interval, resampling whole groups:
    where one unit is measured several times (a transfer judged in every pair of repeated
    runs, both ways), resampling the values alone would count it as that many independent
    draws and narrow the interval."""
    by: dict[object, list[float]] = {}
    for value, group in zip(values, groups, strict=True):
        by.setdefault(group, []).append(abs(value))
    if not by:
        return Interval(math.nan, math.nan, math.nan, 0)
    width = max(len(v) for v in by.values())
    table = np.full((len(by), width), np.nan)  # a group per row, padded with NaN
    for i, v in enumerate(by.values()):
        table[i, :len(v)] = v
    point = float(np.nanquantile(table, q))
    idx = np.random.default_rng(seed).integers(0, len(by), size=(resamples, len(by)))
    stats = np.nanquantile(table[idx].reshape(resamples, -1), q, axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return Interval(point, float(low), float(high), len(by))


def paired_mean_error(reference: Sequence[float], model: Sequence[float]) -> Interval:
    """(mean(model) - mean(reference)) / mean(reference) over paired samples (the same
    requests in both engines), resampling pairs."""
    if len(reference) != len(model):
        raise ValueError("paired samples must have the same length")

    def ratio(rows: np.ndarray) -> np.ndarray:
        ref = rows[..., 0].mean(axis=1)
        return (rows[..., 1].mean(axis=1) - ref) / ref

    return bootstrap(list(zip(reference, model, strict=True)), ratio)


def ttft_verdict(iv: Interval, target: float = TTFT_TARGET, bound: float = TTFT_CI_BOUND,
                 min_n: int = MIN_REQUESTS) -> tuple[str, str]:
    """(kind, sentence): kind is agree | disagree | inconclusive."""
    if iv.n < min_n or math.isnan(iv.point):
        return "inconclusive", f"inconclusive: n too small ({iv.n} requests, need {min_n})"
    ci = f"CI {100 * iv.low:+.1f}% .. {100 * iv.high:+.1f}%, n={iv.n}"
    if abs(iv.point) <= target and max(abs(iv.low), abs(iv.high)) <= bound:
        return "agree", f"agree within {100 * target:.0f}% ({100 * iv.point:+.1f}%, {ci})"
    if iv.low > target or iv.high < -target:
        return "disagree", f"disagree: {100 * iv.point:+.1f}% ({ci})"
    return "inconclusive", (f"inconclusive: {100 * iv.point:+.1f}% ({ci}) straddles the "
                            f"{100 * target:.0f}% target; more seeds narrow it")


def seed_agreement(orders: Sequence[tuple[Sequence[str], Sequence[str]]]) -> dict:
    """Per seed, whether both engines rank the schedulers the same."""
    same = [list(a) == list(b) for a, b in orders]
    return {"seeds": len(same), "same": sum(same),
            "share": (sum(same) / len(same)) if same else math.nan}
