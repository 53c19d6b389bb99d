"""KVRS (RecompOrMigrate) recovery after a decode instance fails: pure cost model and policy.

When the decode instance holding, or about to receive, a request's KV fails, the request
moves to a healthy decode instance by one of two paths:

- migrate: the still-alive prefill instance sends the full KV cache again;
  cost = KV bytes x 8 / available bandwidth in bit/s (+ the target's queue delay).
  The seed's pseudo-code divides bytes by Mbit/s x 1e6 and so is 8x optimistic; its own
  figure (1.21 GB over 25 Gbps = 387 ms) is the bit-correct one, which this follows.
- recompute: the target reruns prefill; cost = T_prefill(L) (+ the queue of recompute
  work ahead of it there), T_prefill from a profiled table by linear interpolation.

Policies: always_migrate, always_recompute, adaptive (the cheaper; a tie migrates).
Any policy aborts, with the reason, when neither path meets the remaining TTFT budget.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.model.cost import effective_bandwidth

POLICIES = ("always_migrate", "always_recompute", "adaptive")
MIGRATE, RECOMPUTE, ABORT = "migrate", "recompute", "abort"
DEFAULT_MIGRATION_SLOTS = 32


@dataclass(frozen=True)
class PrefillTable:
    """Profiled (prompt tokens, prefill seconds); linear between points, the end
    segments extended beyond them."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        xs = [p[0] for p in self.points]
        if len(xs) < 2 or xs != sorted(set(xs)):
            raise ValueError("a prefill table needs >= 2 points with increasing lengths")

    def time(self, tokens: float) -> float:
        xs = [p[0] for p in self.points]
        k = min(max(bisect.bisect_right(xs, tokens), 1), len(xs) - 1)
        (x0, y0), (x1, y1) = self.points[k - 1], self.points[k]
        return max(0.0, y0 + (y1 - y0) * (tokens - x0) / (x1 - x0))

    @classmethod
    def from_timing(cls, timing, max_tokens: int = 131072) -> PrefillTable:
        """The timing model's T_prefill(l) = c*l + d as a (linear) table."""
        return cls(((1, timing.prefill_time(1)), (max_tokens, timing.prefill_time(max_tokens))))


# The KVRS seed's OPT-13B profile (prompt length -> prefill seconds).
OPT13B_PREFILL = PrefillTable(((512, 0.03), (1024, 0.06), (2048, 0.12)))


def migrate_cost(kv_bytes: float, bandwidth_bps: float, queue_delay_s: float = 0.0) -> float:
    """Seconds to move the KV (bytes) at bandwidth_bps (bits/s), plus the target's queue."""
    if bandwidth_bps <= 0:
        return float("inf")
    return kv_bytes * 8 / bandwidth_bps + queue_delay_s


def recompute_cost(prompt_tokens: int, table: PrefillTable, queue_delay_s: float = 0.0) -> float:
    return table.time(prompt_tokens) + queue_delay_s


def crossover_queue_depth(kv_bytes: float, bandwidth_bps: float, prompt_tokens: int,
                          table: PrefillTable, per_request_delay_s: float) -> float:
    """Queued requests at the recompute target at which recomputing costs as much as
    migrating (the seed's crossover: recompute queues ~60 ms/request, migrate is flat).
    0 when migrating always pays; inf when the queue never matters."""
    gap = migrate_cost(kv_bytes, bandwidth_bps) - recompute_cost(prompt_tokens, table)
    if gap <= 0:
        return 0.0
    if per_request_delay_s <= 0:
        return float("inf")
    return gap / per_request_delay_s


@dataclass(frozen=True)
class RecoveryDecision:
    action: str  # migrate | recompute | abort
    migrate_s: float
    recompute_s: float
    reason: str = ""


def decide(policy: str, migrate_s: float, recompute_s: float,
           budget_s: float = float("inf")) -> RecoveryDecision:
    """Algorithm ROM_DECIDE plus the SLO check: abort when neither path fits the budget."""
    if policy not in POLICIES:
        raise ValueError(f"unknown recovery policy {policy!r}; choose from {', '.join(POLICIES)}")
    if min(migrate_s, recompute_s) > budget_s:
        return RecoveryDecision(ABORT, migrate_s, recompute_s,
                                f"neither path meets the remaining TTFT budget of "
                                f"{budget_s:.3f} s (migrate {migrate_s:.3f} s, recompute "
                                f"{recompute_s:.3f} s)")
    if policy == "always_migrate":
        action = MIGRATE
    elif policy == "always_recompute":
        action = RECOMPUTE
    else:
        action = MIGRATE if migrate_s <= recompute_s else RECOMPUTE
    return RecoveryDecision(action, migrate_s, recompute_s)


class MigrationSlots:
    """At most `capacity` concurrent migrations (KVRS's slot reservation)."""

    def __init__(self, capacity: int = DEFAULT_MIGRATION_SLOTS):
        if capacity < 1:
            raise ValueError("migration slots must be >= 1")
        self.capacity = capacity
        self.used = 0

    def acquire(self) -> bool:
        if self.used >= self.capacity:
            return False
        self.used += 1
        return True

    def release(self) -> None:
        if self.used == 0:
            raise RuntimeError("release without acquire")
        self.used -= 1


class BandwidthEWMA:
    """Exponentially weighted mean of measured transfer rates (bits/s): the fallback
    when the oracle has no live figure."""

    def __init__(self, alpha: float = 0.2, initial_bps: float | None = None):
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = alpha
        self.value = initial_bps

    def observe(self, size_bytes: float, seconds: float) -> None:
        if seconds <= 0 or size_bytes <= 0:
            return
        rate = size_bytes * 8 / seconds
        self.value = rate if self.value is None else self.alpha * rate + (1 - self.alpha) * self.value


def recovery_bandwidth_bps(oracle, prefill: str, target: str, oracle_fresh: bool,
                           ewma: BandwidthEWMA, n_inflight: int = 0) -> float:
    """Live per-tier bandwidth from the oracle, shared with the prefill instance's other
    transfers in flight on that tier (NetKV's B_eff, eq. 3); else the EWMA of
    measured migrations."""
    if oracle_fresh or ewma.value is None:
        tier = oracle.tier(prefill, target)
        return 8 * effective_bandwidth(oracle.bandwidth(tier), oracle.congestion_of(tier),
                                       n_inflight)
    return ewma.value


def crossover_curve(kv_bytes_of, table: PrefillTable, bandwidths_bps: Sequence[float],
                    lengths: Sequence[int], per_request_delay_s: float) -> list[dict]:
    """The crossover queue depth over bandwidth x sequence length (the seed's figure)."""
    return [{"bandwidth_gbps": b / 1e9, "tokens": n,
             "crossover_queue": crossover_queue_depth(kv_bytes_of(n), b, n, table,
                                                      per_request_delay_s)}
            for b in bandwidths_bps for n in lengths]


@dataclass(frozen=True)
class RecoveryPlan:
    action: str  # migrate | recompute | abort
    migrate_s: float
    recompute_s: float  # the prefill time alone (what the target must spend)
    reason: str = ""
    slot_fallback: bool = False  # wanted to migrate, no slot free


def plan_recovery(policy: str, kv_bytes: float, prompt_tokens: int, bandwidth_bps: float,
                  migrate_wait_s: float, recompute_wait_s: float, recompute_backlog_s: float,
                  table: PrefillTable, budget_s: float, slots: MigrationSlots) -> RecoveryPlan:
    """Both engines' recovery step: price migrating to its target and recomputing on its
    own (they may differ: KVRS recomputes intra-node), let the policy decide, and take a
    migration slot (recompute when none is free)."""
    mig = migrate_cost(kv_bytes, bandwidth_bps, migrate_wait_s)
    rec = recompute_cost(prompt_tokens, table, recompute_backlog_s + recompute_wait_s)
    choice = decide(policy, mig, rec, budget_s)
    prefill_s = table.time(prompt_tokens)
    if choice.action == MIGRATE and not slots.acquire():
        return RecoveryPlan(RECOMPUTE, mig, prefill_s, "no migration slot free", True)
    return RecoveryPlan(choice.action, mig, prefill_s, choice.reason)


def ttft_budget(slo_s: float, now: float, arrival_s: float, first_token: float | None) -> float:
    """What is left of the TTFT SLO; unbounded once the first token was delivered."""
    return float("inf") if first_token is not None else slo_s - (now - arrival_s)


def prefill_table_for(points, timing) -> PrefillTable:
    """The scenario's profiled table, or the timing model's T_prefill as one."""
    return PrefillTable(tuple(map(tuple, points))) if points else PrefillTable.from_timing(timing)


def nearest_instance(spec, failed: str, names, load) -> str:
    """The healthy instance nearest the failed one (same server, rack, pod, then any),
    the least loaded (`load(name)`) among equals: where KVRS recomputes intra-node."""
    return min(names, key=lambda n: (spec.tier(failed, n), load(n), n))


class RecoveryBook:
    """What a recovering control plane keeps between failures, the same in both engines:
    the recompute table, migration slots, the bandwidth EWMA, per-decode recompute
    backlog, and counts of its decisions."""

    def __init__(self, cfg, timing):
        self.cfg = cfg
        self.table = prefill_table_for(cfg.prefill_table, timing)
        self.slots = MigrationSlots(cfg.migration_slots)
        self.ewma = BandwidthEWMA()
        self.backlog: dict[str, float] = {}  # decode -> when its recompute queue clears
        self.decisions: Counter[str] = Counter()
        self.slot_fallbacks = 0
