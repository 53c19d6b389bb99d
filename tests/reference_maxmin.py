"""Two references the flow model's max-min sharing is checked against
(tests/test_maxmin.py), each recomputing every flow and link from scratch by a different
route: sequential progressive filling (reference_rates, the model's sharing before it
became incremental) and the round-wise local-bottleneck filling on arrays
(array_reference_rates, the model's vectorised fill for big components until one
implementation was kept)."""

from __future__ import annotations

import numpy as np


def reference_rates(flows: dict, links: dict) -> dict[int, float]:
    """flow id -> rate: strict priority between levels (0 first), weighted max-min
    within a level, caps (effective_cap) freezing a flow when they bind first."""
    rates: dict[int, float] = {}
    residual = {hop: link.kv_capacity for hop, link in links.items() if link.flows}
    for level in sorted({f.level for f in flows.values()}):
        _fill(flows, {fid for fid, f in flows.items() if f.level == level}, residual, rates)
    return rates


def _fill(flows, unfrozen: set[int], residual: dict, rates: dict) -> None:
    """Sequential filling, every step recounted from scratch (no state carried between
    steps, unlike the model's heap): the link with the smallest residual per unfrozen
    weight is the next bottleneck, unless a cap binds below its share first."""
    while unfrozen:
        weights: dict = {}
        for fid in unfrozen:
            for hop in flows[fid].path:
                weights[hop] = weights.get(hop, 0.0) + flows[fid].weight
        hop = min(weights, key=lambda h: residual[h] / weights[h])
        unit = max(residual[hop] / weights[hop], 0.0)
        capped = [(cap / f.weight, fid) for fid in unfrozen
                  if (cap := (f := flows[fid]).effective_cap()) is not None
                  and cap < unit * f.weight]
        if capped:
            _, fid = min(capped)
            frozen = {fid: flows[fid].effective_cap()}
        else:
            frozen = {fid: unit * flows[fid].weight for fid in unfrozen
                      if hop in flows[fid].path}
        for fid, rate in frozen.items():
            rates[fid] = rate
            unfrozen.discard(fid)
            for h in flows[fid].path:
                residual[h] -= rate


def array_reference_rates(flows: dict, links: dict) -> dict[int, float]:
    """As reference_rates, by fill_on_arrays, level by level."""
    hops = sorted(h for h, link in links.items() if link.flows)
    index = {h: i for i, h in enumerate(hops)}
    m = len(hops)
    fids = sorted(flows)
    if not fids:
        return {}
    width = max(len(flows[f].path) for f in fids)
    inc = np.array([[index[h] for h in flows[f].path] + [m] * (width - len(flows[f].path))
                    for f in fids], dtype=np.int64)
    weight = np.array([flows[f].weight for f in fids], dtype=float)
    cap_ratio = np.array([c if (c := flows[f].effective_cap()) is not None else np.inf
                          for f in fids], dtype=float) / weight
    level = np.array([flows[f].level for f in fids])
    residual = np.array([links[h].kv_capacity for h in hops], dtype=float)
    rates = np.zeros(len(fids))
    for lv in np.unique(level):
        rows = np.flatnonzero(level == lv)
        got = fill_on_arrays(inc[rows], weight[rows], cap_ratio[rows], residual)
        rates[rows] = got
        residual -= _per_link(inc[rows], got, m)
    return dict(zip(fids, rates.tolist(), strict=True))


def _per_link(inc: np.ndarray, values: np.ndarray, m: int) -> np.ndarray:
    """Sum of `values` (one per flow) over each of m links; column entries >= m are
    padding."""
    flat = inc.ravel()
    real = flat < m
    return np.bincount(flat[real], weights=np.repeat(values, inc.shape[1])[real],
                       minlength=m)[:m]


def fill_on_arrays(inc: np.ndarray, weight: np.ndarray, cap_ratio: np.ndarray,
                   residual: np.ndarray) -> np.ndarray:
    """Weighted max-min rates of n flows over m links, with per-flow caps, on arrays.

    inc: (n, hops) link indices per flow, padded with m; cap_ratio: cap / weight (inf
    where none); residual: the m links' capacity left. Progressive filling freezes one
    bottleneck at a time; here every round freezes all *local* bottlenecks at once: a
    link whose fair share (residual / weight of its unfrozen flows) is no larger than
    any limit of the flows crossing it (their other links' shares, their caps). No flow
    of such a link can freeze earlier elsewhere, and no other flow takes from it, so it
    saturates at exactly that share, as in sequential filling; a cap is a one-flow link.
    The global minimum is always local, so every round freezes something, and rounds
    number the bottleneck levels, not the links (the distributed max-min algorithms of
    Bertsekas & Gallager, "Data Networks", 6.5, work by the same local test)."""
    n, hops = inc.shape
    m = len(residual)
    flat = inc.ravel()
    real = flat < m
    owner = np.repeat(np.arange(n), hops)
    order = np.argsort(flat, kind="stable")
    order = order[real[order]]
    by_link, rows_by_link = flat[order], owner[order]
    starts = np.flatnonzero(np.r_[True, by_link[1:] != by_link[:-1]]) if len(order) else \
        np.zeros(0, dtype=np.int64)
    link_ids = by_link[starts]
    resid = residual.astype(float).copy()
    wsum = np.bincount(flat[real], weights=np.repeat(weight, hops)[real], minlength=m)
    count = np.bincount(flat[real], minlength=m)
    rate = np.zeros(n)
    active = np.ones(n, dtype=bool)
    share = np.full(m + 1, np.inf)
    link_min = np.full(m, np.inf)
    while active.any():
        live = count > 0
        share[:m] = np.inf
        share[:m][live] = np.maximum(resid[live], 0.0) / wsum[live]
        flow_min = share[inc].min(axis=1)
        limit = np.minimum(flow_min, cap_ratio)
        limit[~active] = np.inf
        link_min[:] = np.inf
        if len(starts):
            link_min[link_ids] = np.minimum.reduceat(limit[rows_by_link], starts)
        bottleneck = np.append(live & (share[:m] <= link_min), False)
        freeze = active & (bottleneck[inc].any(axis=1) | (cap_ratio <= flow_min))
        rate[freeze] = limit[freeze] * weight[freeze]
        active &= ~freeze
        frozen = inc[freeze].ravel()
        keep = frozen < m
        frozen = frozen[keep]
        resid -= np.bincount(frozen, weights=np.repeat(rate[freeze], hops)[keep], minlength=m)
        wsum -= np.bincount(frozen, weights=np.repeat(weight[freeze], hops)[keep], minlength=m)
        count -= np.bincount(frozen, minlength=m)
    return rate
