"""KV-reuse retrieval, MFS's first stage (arXiv 2603.17456 s3.1, s4.4): pure.

A request whose prompt prefix is cached on another instance fetches those KV blocks
over the fabric while it waits for, and during, its prefill, and skips computing them.
Prefill runs layer by layer; layer l needs the fetched prefix of layer l, so a fetch
that falls behind stalls the GPU (and every request queued behind it). That dependency
is the retrieval flow's implicit deadline; MFS ranks such flows by the Relative Layer
Index, RLI = target layer - executing layer (testbed.model.mfs.rli).

Our choices where the paper is silent or does not fit this testbed:
- The holder is the live decode instance with the longest cached prefix of the prompt
  (prefix caches live on decode instances here); a fetch happens only for at least
  `min_tokens` reusable tokens.
- Layer l of the fetch has arrived when a fraction (l + 1) / L of its bytes has (a
  fetch streams layer by layer, in order).
- The executing layer is estimated by the sender from the prefill's expected start and
  per-layer compute time, open loop (neither engine feeds stalls back to the sender).
- The prefill ends at max(start + compute, fetched + one layer of compute).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Reuse:
    holder: str
    tokens: int


def choose_holder(hits: Mapping[str, int], min_tokens: int) -> Reuse | None:
    """The instance holding the longest reusable prefix (ties: by name), if long enough."""
    best = min(hits.items(), key=lambda kv: (-kv[1], kv[0]), default=None)
    if best is None or best[1] < max(min_tokens, 1):
        return None
    return Reuse(best[0], best[1])


def layer_time(compute_s: float, n_layers: int) -> float:
    """Compute time of one layer of a prefill."""
    if n_layers < 1:
        raise ValueError("a model has at least one layer")
    return compute_s / n_layers


def executing_layer(now: float, start: float, layer_s: float) -> int:
    """The layer the prefill is computing (negative while it still waits in the queue)."""
    if layer_s <= 0:
        return 0
    return math.floor((now - start) / layer_s)


def fetched_layers(done_bytes: float, total_bytes: float, n_layers: int) -> int:
    """Layers whose fetched KV is complete."""
    if total_bytes <= 0:
        return n_layers
    return min(n_layers, math.floor(n_layers * done_bytes / total_bytes + 1e-9))


def retrieval_rli(now: float, start: float, layer_s: float, done_bytes: float,
                  total_bytes: float, n_layers: int) -> int:
    """RLI of a fetch: the layer it delivers next minus the layer being computed."""
    target = fetched_layers(done_bytes, total_bytes, n_layers)
    return max(0, target - executing_layer(now, start, layer_s))


def prefill_end(start: float, compute_s: float, fetched_at: float | None,
                layer_s: float) -> float:
    """When a prefill that reuses fetched KV ends (fetched_at None: no fetch)."""
    if fetched_at is None:
        return start + compute_s
    return max(start + compute_s, fetched_at + layer_s)
