"""Multi-stage Flow Scheduling (MFS, arXiv 2603.17456): priority levels for KV flows, pure.

Defer-and-Promote over a Reverse Multi-Level Queue: K levels, 0 the highest. A flow
starts deferred in a low level and is promoted, never demoted, at layer boundaries as
its urgency grows.

- Explicit deadlines (P2D transfers, deadline = the request's TTFT SLO): urgency is the
  Minimal Link Utilisation, MLU = remaining bytes / ((deadline - now) x B_eff), the share
  of the residual bandwidth needed to finish just in time (>= 1: infeasible). Levels
  come from geometric thresholds theta_k = theta_top x ratio^k (k = 0..K-2; the lowest
  level takes everything below). The paper's extracted text lost the constants; we
  choose theta_top = 0.8 and ratio = 0.5 (parameters) and reserve level 0 for P2D flows
  at theta_top or more.
- Implicit deadlines (KV-reuse retrieval): urgency by the Relative Layer Index,
  RLI = target layer - executing layer (smaller = more urgent), capped into levels 1..K-1.
- Across requests: the Robust Effective Deadline of a batch splits its deadlines at the
  largest gap into tight and loose groups, RED = rho x D_tight + (1 - rho) x D_loose with
  rho the tight share (rare outliers cannot hijack the batch), and a feasibility check
  prunes the requests adding the most delay into a scavenger class.
- Baselines on the same levels: fair sharing (one level), SJF, EDF (explicit deadlines
  first, the rest fair) and Karuna (deadline flows at their minimum rate, the rest SJF).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_LEVELS = 8
THETA_TOP = 0.8
THETA_RATIO = 0.5


def mlu(remaining_bytes: float, deadline_s: float, now_s: float, bandwidth: float) -> float:
    """Minimal Link Utilisation (bandwidth in bytes/s); inf when the deadline has passed."""
    if remaining_bytes <= 0:
        return 0.0
    slack = deadline_s - now_s
    if slack <= 0 or bandwidth <= 0:
        return math.inf
    return remaining_bytes / (slack * bandwidth)


def thresholds(levels: int = DEFAULT_LEVELS, top: float = THETA_TOP,
               ratio: float = THETA_RATIO) -> list[float]:
    """theta_0 > theta_1 > ... > theta_{K-2}: MLU at or above theta_k means level <= k."""
    if levels < 2 or not 0 < ratio < 1 or top <= 0:
        raise ValueError("need >= 2 levels, 0 < ratio < 1 and a positive top threshold")
    return [top * ratio**k for k in range(levels - 1)]


def level_for_mlu(u: float, levels: int = DEFAULT_LEVELS, top: float = THETA_TOP,
                  ratio: float = THETA_RATIO) -> int:
    for k, theta in enumerate(thresholds(levels, top, ratio)):
        if u >= theta:
            return k
    return levels - 1


def promote(current: int, target: int) -> int:
    """Monotonic: a flow only ever moves up (to a smaller level index)."""
    return min(current, target)


def rli(target_layer: int, executing_layer: int) -> int:
    return max(0, target_layer - executing_layer)


def level_for_rli(r: int, levels: int = DEFAULT_LEVELS) -> int:
    """Implicit deadlines never take level 0 (reserved for urgent P2D flows)."""
    return min(1 + r, levels - 1)


def robust_effective_deadline(deadlines: Sequence[float]) -> float:
    """RED of a batch: split at the largest gap between sorted deadlines."""
    if not deadlines:
        raise ValueError("a batch needs at least one deadline")
    d = sorted(deadlines)
    if len(d) == 1 or d[-1] == d[0]:
        return d[0]
    gaps = [d[i + 1] - d[i] for i in range(len(d) - 1)]
    cut = gaps.index(max(gaps)) + 1
    rho = cut / len(d)
    return rho * d[0] + (1 - rho) * d[cut]


@dataclass(frozen=True)
class Job:
    """A request (or batch) for the feasibility check: its deadline, the time it needs of
    the resource the jobs share, and the least time it needs alone (its own path)."""

    name: str
    deadline: float
    work_s: float
    alone_s: float = 0.0


def feasible_order(jobs: Sequence[Job], now: float = 0.0) -> tuple[list[str], list[str]]:
    """Order by deadline; while some job would finish after its deadline, prune the job
    contributing the most work. Returns (order of kept jobs, pruned jobs)."""
    kept = sorted(jobs, key=lambda j: (j.deadline, j.name))
    pruned: list[str] = []
    while True:
        t, late = now, False
        for job in kept:
            t += job.work_s
            if t > job.deadline:
                late = True
                break
        if not late:
            return [j.name for j in kept], pruned
        worst = max(kept, key=lambda j: (j.work_s, j.name))
        kept.remove(worst)
        pruned.append(worst.name)


@dataclass(frozen=True)
class FlowView:
    """What a policy sees of a flow when it assigns a level: only what its sender knows,
    so the emulation's senders (testbed/workers/kvstream.py) compute the very same level
    per layer chunk that the flow simulator does."""

    name: str
    remaining: float  # bytes
    deadline: float | None  # explicit deadline (P2D), else None
    rli: int | None = None  # implicit-deadline flows: relative layer index
    bandwidth: float | None = None  # bytes/s this flow's path offers (default: the call's)


# Baselines on K levels: SJF and EDF are global orders in their papers; with a handful of
# priority queues they become size and slack buckets (as PIAS does for SJF), which a
# sender can compute alone. Our choices, both geometric (x2 per level):
SJF_BASE_S = 0.01  # level 0: a flow that would finish within 10 ms alone on its path
EDF_BASE_S = 0.1  # level 0: a deadline within 100 ms


def _bucket(x: float, base: float, top: int) -> int:
    """0 for x <= base, then one level per doubling, capped at `top`."""
    if x <= base:
        return 0
    return min(top, math.ceil(math.log2(x / base)))


def sjf_level(remaining: float, bandwidth: float, levels: int = DEFAULT_LEVELS) -> int:
    """Shortest job first: bucket of the time the flow needs alone on its path."""
    return _bucket(remaining / bandwidth, SJF_BASE_S, levels - 1)


def edf_level(deadline: float | None, now: float, levels: int = DEFAULT_LEVELS) -> int:
    """Earliest deadline first for explicit deadlines (slack buckets over levels 0..K-2);
    implicit-deadline flows share the bottom level fairly."""
    if deadline is None:
        return levels - 1
    return _bucket(max(deadline - now, 0.0), EDF_BASE_S, levels - 2)


def target_level(policy: str, flow: FlowView, now: float, bandwidth: float,
                 levels: int = DEFAULT_LEVELS, top: float = THETA_TOP,
                 ratio: float = THETA_RATIO) -> int:
    """The level `policy` wants for one flow now, before monotonic promotion."""
    bw = flow.bandwidth or bandwidth
    if policy == "fair":
        return levels - 1
    if policy == "sjf":
        return sjf_level(flow.remaining, bw, levels)
    if policy == "edf":
        return edf_level(flow.deadline, now, levels)
    if policy == "karuna":  # deadline flows on top, rate-limited (karuna_min_rate); rest SJF
        if flow.deadline is not None:
            return 0
        return min(1 + sjf_level(flow.remaining, bw, levels), levels - 1)
    if policy != "mfs":
        raise ValueError(f"unknown flow policy {policy!r}; mfs, fair, sjf, edf or karuna")
    if flow.deadline is not None:
        return level_for_mlu(mlu(flow.remaining, flow.deadline, now, bw), levels, top, ratio)
    return level_for_rli(flow.rli or 0, levels)


def initial_level(policy: str, levels: int = DEFAULT_LEVELS) -> int:
    """Where a new flow starts before its first evaluation: MFS defers to the bottom."""
    return levels - 1


def flow_level(policy: str, flow: FlowView, now: float, current: int, pruned: bool = False,
               levels: int = DEFAULT_LEVELS, top: float = THETA_TOP,
               ratio: float = THETA_RATIO) -> int:
    """One flow's level at a layer boundary, as its sender decides it: the scavenger
    once pruned, else the policy's target (only ever a promotion under MFS)."""
    if pruned:
        return scavenger_level(levels)
    target = target_level(policy, flow, now, flow.bandwidth or 1.0, levels, top, ratio)
    return promote(current, target) if policy == "mfs" else target


def p2d_deadline(arrival_s: float, slo_s: float, first_iteration_s: float) -> float:
    """A P2D transfer's explicit deadline: the TTFT deadline less the decode iteration
    that must follow the transfer before the first token."""
    return arrival_s + slo_s - first_iteration_s


def assign_levels(policy: str, flows: Sequence[FlowView], now: float, bandwidth: float,
                  levels: int = DEFAULT_LEVELS, current: dict[str, int] | None = None,
                  top: float = THETA_TOP, ratio: float = THETA_RATIO) -> dict[str, int]:
    """Level per flow under `policy` (mfs | fair | sjf | edf | karuna); 0 is served first.
    MFS only promotes (never demotes); the baselines follow their target each time."""
    current = current or {}
    return {f.name: flow_level(policy, f if f.bandwidth else _with_bw(f, bandwidth), now,
                               current.get(f.name, levels - 1), False, levels, top, ratio)
            for f in flows}


def _with_bw(f: FlowView, bandwidth: float) -> FlowView:
    return FlowView(f.name, f.remaining, f.deadline, f.rli, bandwidth)


def scavenger_level(levels: int = DEFAULT_LEVELS) -> int:
    """Below every level: pruned (infeasible) requests get the link only when it is idle."""
    return levels


PRUNING = ("feasibility", "alone", "none")


def prune_infeasible(jobs: Sequence[Job], now: float, rule: str = "feasibility") -> set[str]:
    """MFS's inter-request feasibility check at one sender. A job that cannot meet its
    deadline even alone on its path is pruned; under "feasibility" (the paper's check)
    the rest share the sender's NIC (work_s is their time on it) and give way, heaviest
    first, until the others fit; "alone" stops after the first step, "none" prunes
    nothing. Pruned requests go to the scavenger class."""
    if rule == "none":
        return set()
    hopeless = {j.name for j in jobs if now + j.alone_s > j.deadline}
    if rule == "alone":
        return hopeless
    _, pruned = feasible_order([j for j in jobs if j.name not in hopeless], now)
    return hopeless | set(pruned)


def karuna_min_rate(remaining: float, deadline: float, now: float) -> float:
    """Karuna gives a deadline flow just the rate that meets its deadline (bytes/s)."""
    slack = deadline - now
    return math.inf if slack <= 0 else remaining / slack
