"""The flow model's max-min sharing as it was before incremental recomputation: every
flow and link, progressive filling from scratch. Kept as the reference the incremental
FluidNetwork.recompute is checked against (tests/test_maxmin.py)."""

from __future__ import annotations


def reference_rates(flows: dict, links: dict) -> dict[int, float]:
    """flow id -> rate: strict priority between levels (0 first), weighted max-min
    within a level, caps (effective_cap) freezing a flow when they bind first."""
    rates: dict[int, float] = {}
    residual = {hop: link.kv_capacity for hop, link in links.items() if link.flows}
    for level in sorted({f.level for f in flows.values()}):
        _fill(flows, {fid for fid, f in flows.items() if f.level == level}, residual, rates)
    return rates


def _fill(flows, unfrozen: set[int], residual: dict, rates: dict) -> None:
    active: dict = {}
    weights: dict = {}
    for fid in unfrozen:
        w = flows[fid].weight
        for hop in flows[fid].path:
            active.setdefault(hop, set()).add(fid)
            weights[hop] = weights.get(hop, 0.0) + w
    while unfrozen:
        hop = min(active, key=lambda h: residual[h] / weights[h])
        unit = max(residual[hop] / weights[hop], 0.0)
        capped = [(cap / f.weight, fid) for fid in unfrozen
                  if (cap := (f := flows[fid]).effective_cap()) is not None
                  and cap < unit * f.weight]
        if capped:
            _, fid = min(capped)
            _freeze(flows, fid, flows[fid].effective_cap(), unfrozen, residual, active,
                    weights, rates)
            continue
        for fid in list(active[hop]):
            _freeze(flows, fid, unit * flows[fid].weight, unfrozen, residual, active, weights,
                    rates)


def _freeze(flows, fid, rate, unfrozen, residual, active, weights, rates) -> None:
    flow = flows[fid]
    rates[fid] = rate
    unfrozen.discard(fid)
    for h in flow.path:
        residual[h] -= rate
        members = active.get(h)
        if members is not None:
            members.discard(fid)
            weights[h] -= flow.weight
            if not members:
                del active[h]
                del weights[h]
