"""How far runs of one workload spread: the flow model run again on each seed's very
requests with only its own random draws changed (the schedulers' tie-breaks, any random
path choice).

A claim's interval resamples the requests of the runs it has, so it holds how much the
gain would move with other requests like them, not how much it moves when the same
requests meet other draws. With NetKV-Full and CLA* that second part is large: most of
their candidates tie on cost (same tier, no queue), the tie-break sends a request to one
decode or another, and from there a backlog forms somewhere else. The flow model shows
it at no cost to the fabric, so every validation measures it here and the report prints
it beside the claims; two packet runs of the demo's requests moved as much
(docs/validation.md, "One run is one draw").
"""

from __future__ import annotations

import statistics
from collections.abc import Collection

from testbed.cells import slug
from testbed.flowsim.simulator import simulate
from testbed.sweep import Lost
from testbed.validate.judging.claims import FLOW_DRAWS, PRIMARY, DrawSpread, claim_pairs, gain, served
from testbed.workloads.build import build_workload

OFFSET = 100_003  # the k-th extra draw of seed s runs with seed s + k * OFFSET


def mean_ttft(requests: list[dict]) -> float | None:
    """Mean TTFT of a run's measured, served requests (None if it has none)."""
    got = [r["ttft"] for r in requests if r.get("measured") and served(r)]
    return statistics.fmean(got) if got else None


def gains(means: dict[str, float]) -> dict[str, float]:
    """'S vs B' -> S's mean-TTFT gain over B (relative; negative: faster)."""
    return {f"{s} vs {b}": float(gain(PRIMARY, means[s], means[b]))
            for s, b in claim_pairs(list(means)) if means[b]}


def seed_draws(cell, seed: int, draws: int = FLOW_DRAWS) -> dict[str, list[float]]:
    """claim -> its mean-TTFT gain in each of `draws` flow-model runs of one seed's
    requests, the seed's own draw first: a claim the seed's own draw cannot measure (no
    request served) is left out, since its shift is taken from that draw."""
    workload = build_workload(cell, seed)
    runs: list[dict[str, float]] = [{} for _ in range(draws)]
    for key in cell.schedulers:
        for k in range(draws):
            m = mean_ttft(simulate(cell, key, seed + k * OFFSET, workload).requests)
            if m is not None:
                runs[k][key] = m
    out: dict[str, list[float]] = {}
    for k in range(draws):
        for claim, g in gains(runs[k]).items():
            if k == 0 or claim in out:
                out.setdefault(claim, []).append(g)
    return out


def pooled(per_seed: dict[int, dict[str, list[float]]]) -> dict[str, dict]:
    """claim -> {sd, low, high, draws, seeds, shifts}: the gain's standard deviation across
    draws of one seed, pooled over the seeds given (seed -> seed_draws of it), and per seed
    the mean of its draws less its own draw (str keys: this goes to JSON)."""
    claims = sorted({c for d in per_seed.values() for c in d})
    return {c: _summary({seed: d[c] for seed, d in per_seed.items() if c in d})
            for c in claims}


def _seed_draws(task: tuple) -> dict[str, list[float]]:
    return seed_draws(*task[2:])


def by_seed(scenario, seeds: Collection[int] | None = None, draws: int = FLOW_DRAWS,
            executor=None) -> dict[str, dict[int, dict[str, list[float]]]]:
    """point -> seed -> seed_draws, for the flow-model scenario's seeds (those of `seeds`
    only, where given); each seed's draws on `executor` (a testbed.sweep.Executor; here by
    default): the same figures either way."""
    cells = [(f"{index:03d}-{slug(point)}", point_scenario)
             for index, (point, point_scenario) in enumerate(scenario.points())]
    tasks = [(i, key, point_scenario, seed, draws) for i, (key, point_scenario, seed) in enumerate(
        (key, point_scenario, seed) for key, point_scenario in cells
        for seed in range(point_scenario.seed, point_scenario.seed + point_scenario.seeds)
        if seeds is None or seed in seeds)]
    runs = executor.map(_seed_draws, tasks) if executor is not None else (
        (t, _seed_draws(t)) for t in tasks)
    out: dict[str, dict[int, dict]] = {key: {} for key, _ in cells}
    for task, result in runs:
        if isinstance(result, Lost):
            raise RuntimeError(f"the flow model's draws of seed {task[3]} failed: "
                               f"{result.error}")
        out[task[1]][task[3]] = result
    return {key: dict(sorted(got.items())) for key, got in out.items()}


def spread(scenario, draws: int = FLOW_DRAWS, executor=None) -> dict[str, dict]:
    """point -> pooled(...) over every seed of the flow-model scenario given (the
    verdict's), for its mean-TTFT claims (by_seed)."""
    return {point: pooled(got) for point, got in by_seed(scenario, None, draws,
                                                         executor).items()}


def draw_spreads(point_spread: dict | None) -> dict[str, DrawSpread]:
    """claim -> its draws' spread (for claims.judge_point), from a point's pooled spread;
    claims whose sd could not be measured are left out."""
    return {c: DrawSpread(t["sd"], t["draws"], {int(k): v for k, v in t["shifts"].items()})
            for c, t in (point_spread or {}).items() if t["sd"] == t["sd"]}


def _summary(groups: dict[int, list[float]]) -> dict:
    """Pooled within-seed sd of a claim's gain (a list of draws per seed), its range, and
    each seed's mean draw less its own (the first)."""
    groups = {seed: g for seed, g in groups.items() if len(g) > 1}
    dof = sum(len(g) - 1 for g in groups.values())
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups.values())
    flat = [x for g in groups.values() for x in g]
    return {"sd": (ss / dof) ** 0.5 if dof else float("nan"),
            "low": min(flat, default=float("nan")), "high": max(flat, default=float("nan")),
            "draws": max((len(g) for g in groups.values()), default=0),
            "seeds": len(groups),
            "shifts": {str(seed): statistics.fmean(g) - g[0] for seed, g in groups.items()}}
