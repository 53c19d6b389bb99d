"""The statistics core (pure): resampling, the one interval type, the normal quantile.

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
from statistics import NormalDist

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 20261123  # resampling transfers and request pairs
CLAIMS_SEED = 20261124  # the claims' block bootstrap


MIN_TAIL = 1e-12  # a level so near 1 that it rounds to 1 (an early look that spends next
# to no alpha) gets the quantile of this tail: z = 7.0, an interval nothing fits in


def z(level: float) -> float:
    """The two-sided normal quantile of a confidence level (1.96 at 95%)."""
    return NormalDist().inv_cdf(1.0 - max((1.0 - level) / 2.0, MIN_TAIL))


@dataclass(frozen=True)
class Interval:
    """A figure and its interval; `n` the units resampled, `se` the bootstrap standard
    error, where known (each written only when given, so a record keeps its keys)."""

    point: float
    low: float
    high: float
    n: int | None = None
    se: float | None = None

    def as_dict(self) -> dict:
        out = {"point": self.point, "low": self.low, "high": self.high}
        if self.n is not None:
            out["n"] = self.n
        if self.se is not None:
            out["se"] = self.se
        return out

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0


def block_length(n: int) -> int:
    return max(1, round(n ** (1 / 3)))


def block_weights(groups: np.ndarray, resamples: int = RESAMPLES, seed: int = CLAIMS_SEED,
                  keys: Sequence | None = None) -> np.ndarray:
    """(resamples, n) counts: how often each request is drawn in each resample, blocks of
    consecutive requests drawn with replacement within each group (a seed; a non-overlapping
    block bootstrap, Carlstein 1986; block length n^(1/3), Hall, Horowitz & Jing 1995).
    With `keys` (each row's request id), a group's rows with one key are one request met
    in several runs (draws of one workload): the blocks are of its distinct requests in
    their first run's order and each of its rows weighs as its request's block."""
    n = len(groups)
    weights = np.zeros((resamples, n))
    rng = np.random.default_rng(seed)
    for k in np.unique(groups):
        idx = np.flatnonzero(groups == k)
        if keys is None:
            rows_of = [[i] for i in idx]
        else:
            by: dict = {}
            for i in idx:
                by.setdefault(keys[i], []).append(i)
            rows_of = list(by.values())
        size = block_length(len(rows_of))
        blocks = [[i for rows in rows_of[j:j + size] for i in rows]
                  for j in range(0, len(rows_of), size)]
        picks = rng.integers(0, len(blocks), size=(resamples, len(blocks)))
        for b, members in enumerate(blocks):
            weights[:, members] += (picks == b).sum(axis=1)[:, None]
    return weights


def weighted_mean(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """w (R, n), x (n, ...) -> (R, ...), ignoring NaN rows of x."""
    ok = ~np.isnan(x)
    num = np.tensordot(w, np.where(ok, x, 0.0), axes=(1, 0))
    den = np.tensordot(w, ok.astype(float), axes=(1, 0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def weighted_quantile(w: np.ndarray, x: np.ndarray, q: float) -> np.ndarray:
    """The q-quantile (inverted CDF) of column x (n,) under each row of weights (R, n)."""
    ok = ~np.isnan(x)
    order = np.argsort(x[ok], kind="stable")
    xs = x[ok][order]
    if len(xs) == 0:
        return np.full(w.shape[0], math.nan)
    cum = np.cumsum(w[:, ok][:, order], axis=1)
    total = cum[:, -1:]
    pos = np.argmax(cum >= q * total - 1e-9, axis=1)
    return xs[pos]


def estimate(point: float, draws: np.ndarray, level: float = CONFIDENCE,
             normal: bool = False) -> Interval:
    """Percentile interval of the draws, or point +- z * bootstrap SE (`normal`)."""
    draws = draws[~np.isnan(draws)]
    if len(draws) < 2 or math.isnan(point):
        return Interval(point, math.nan, math.nan, se=math.nan)
    se = float(np.std(draws, ddof=1))
    if normal:
        half = z(level) * se
        return Interval(point, point - half, point + half, se=se)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha])
    return Interval(point, float(low), float(high), se=se)


def bootstrap(values, statistic: Callable[[np.ndarray], np.ndarray],
              resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Percentile interval of a statistic over resamples of `values`' rows (with
    replacement; a row may be a pair). `statistic` takes a (resamples, n, ...) array and
    reduces along axis 1."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, n=0)
    point = float(statistic(data[None, ...])[0])
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    stats = statistic(data[idx])
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return Interval(point, float(low), float(high), n=n)


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
        return Interval(math.nan, math.nan, math.nan, n=0)
    width = max(len(v) for v in by.values())
    table = np.full((len(by), width), np.nan)  # a group per row, padded with NaN
    for i, v in enumerate(by.values()):
        table[i, :len(v)] = v
    point = float(np.nanquantile(table, q))
    idx = np.random.default_rng(seed).integers(0, len(by), size=(resamples, len(by)))
    stats = np.nanquantile(table[idx].reshape(resamples, -1), q, axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return Interval(point, float(low), float(high), n=len(by))


def paired_mean_error(reference: Sequence[float], model: Sequence[float]) -> Interval:
    """(mean(model) - mean(reference)) / mean(reference) over paired samples (the same
    requests in both engines), resampling pairs."""
    if len(reference) != len(model):
        raise ValueError("paired samples must have the same length")

    def ratio(rows: np.ndarray) -> np.ndarray:
        ref = rows[..., 0].mean(axis=1)
        return (rows[..., 1].mean(axis=1) - ref) / ref

    return bootstrap(list(zip(reference, model, strict=True)), ratio)


def seed_agreement(orders: Sequence[tuple[Sequence[str], Sequence[str]]]) -> dict:
    """Per seed, whether both engines rank the schedulers the same."""
    same = [list(a) == list(b) for a, b in orders]
    return {"seeds": len(same), "same": sum(same),
            "share": (sum(same) / len(same)) if same else math.nan}
