"""Workload profiles (NetKV VI-A), prefix sharing, length override and rate compression.

p_share on a trace: each request keeps the trace's prefix identity (its hash ids) with
probability p_share and is otherwise made cold (fresh ids nobody else has). With the
shipped trace's ~64% natural block reuse, p_share is therefore an upper bound on the
shared fraction. None keeps the trace as it is.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from testbed.workloads.requests import Request


@dataclass(frozen=True)
class Profile:
    name: str
    min_input: int | None
    max_input: int | None
    p_share: float | None
    slo_s: float

    def accepts(self, input_len: int) -> bool:
        if self.min_input is not None and input_len < self.min_input:
            return False
        return self.max_input is None or input_len <= self.max_input


PROFILES: dict[str, Profile] = {
    "chatbot": Profile("chatbot", None, 8192, 0.3, 2.0),
    "rag": Profile("rag", 4096, 65536, 0.7, 5.0),
    "long-context": Profile("long-context", 16385, None, 0.1, 10.0),
    "all": Profile("all", None, None, None, 5.0),
}

# Paper-tuned CLA* weights (w_cache, w_load) per profile.
CLA_WEIGHTS: dict[str, tuple[float, float]] = {
    "chatbot": (1.0, 1.0),
    "rag": (1.0, 1.0),
    "long-context": (1.5, 0.7),
    "all": (1.0, 1.0),
}


class _FreshIds:
    """Hash ids guaranteed unused by the trace, for cold or extended prefixes."""

    def __init__(self, requests: Sequence[Request]):
        self._next = 1 + max((max(r.hash_ids, default=0) for r in requests), default=0)

    def take(self, n: int) -> tuple[int, ...]:
        start, self._next = self._next, self._next + n
        return tuple(range(start, start + n))


def filter_profile(requests: Sequence[Request], profile: Profile) -> list[Request]:
    return [r for r in requests if profile.accepts(r.input_len)]


def override_length(requests: Sequence[Request], length: int) -> list[Request]:
    """Fix every input length (context sweep): keep shared head ids, extend with fresh ones."""
    fresh = _FreshIds(requests)
    need = math.ceil(length / 512)
    out = []
    for r in requests:
        ids = r.hash_ids[:need]
        if len(ids) < need:
            ids = ids + fresh.take(need - len(ids))
        out.append(replace(r, input_len=length, hash_ids=ids))
    return out


def apply_sharing(requests: Sequence[Request], p_share: float, rng: random.Random) -> list[Request]:
    fresh = _FreshIds(requests)
    return [
        r if rng.random() < p_share else replace(r, hash_ids=fresh.take(len(r.hash_ids)))
        for r in requests
    ]


def natural_rate(requests: Sequence[Request]) -> float:
    """Requests per second of the (filtered) trace over its own time span."""
    if len(requests) < 2:
        raise ValueError("need at least two requests to measure a rate")
    span = requests[-1].arrival_s - requests[0].arrival_s
    if span <= 0:
        raise ValueError("all requests arrive at the same instant; no rate to compress")
    return (len(requests) - 1) / span


def compress(
    requests: Sequence[Request], target_rps: float, offset_s: float, duration_s: float
) -> list[Request]:
    """Scale timestamps by one factor to reach target_rps; keep [0, duration) after offset.

    One multiplicative factor preserves the trace's burstiness (NetKV VI-A).
    """
    if target_rps <= 0:
        raise ValueError(f"target rate must be positive, got {target_rps}")
    factor = natural_rate(requests) / target_rps
    out = []
    for r in requests:
        if r.arrival_s < offset_s:
            continue
        t = (r.arrival_s - offset_s) * factor
        if t >= duration_s:
            break
        out.append(replace(r, arrival_s=t))
    return out
