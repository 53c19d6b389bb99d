"""Seeded synthetic workload: Poisson arrivals, lognormal lengths, Zipf-shared prefixes.

For runs without a trace, or for shapes the trace lacks. A request shares a prefix with
probability p_share: it draws a document from a pool with Zipf(s) popularity and
reuses its first `share_fraction` of blocks; the rest of its ids are fresh.
"""

from __future__ import annotations

import math
import random

from testbed.workloads.requests import Request


def generate(
    rng: random.Random,
    rate_rps: float,
    duration_s: float,
    mean_input: int,
    sigma_input: float,
    mean_output: int,
    min_input: int = 16,
    max_input: int = 131072,
    p_share: float = 0.5,
    documents: int = 64,
    zipf_s: float = 1.1,
    share_fraction: float = 0.6,
) -> list[Request]:
    if rate_rps <= 0 or duration_s <= 0:
        raise ValueError("rate_rps and duration_s must be positive")
    mu = math.log(mean_input) - sigma_input**2 / 2
    weights = [1.0 / (k + 1) ** zipf_s for k in range(documents)]
    doc_blocks = math.ceil(max_input / 512)
    next_id = documents * doc_blocks  # ids below this belong to shared documents
    out: list[Request] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate_rps)
        if t >= duration_s:
            return out
        n_in = int(min(max(rng.lognormvariate(mu, sigma_input), min_input), max_input))
        n_out = max(1, int(rng.expovariate(1.0 / mean_output)))
        blocks = math.ceil(n_in / 512)
        ids: list[int] = []
        if rng.random() < p_share:
            doc = rng.choices(range(documents), weights)[0]
            shared = min(blocks, int(blocks * share_fraction))
            ids = [doc * doc_blocks + k for k in range(shared)]
        fresh = blocks - len(ids)
        ids.extend(range(next_id, next_id + fresh))
        next_id += fresh
        out.append(Request(f"r{len(out)}", t, n_in, n_out, tuple(ids)))
