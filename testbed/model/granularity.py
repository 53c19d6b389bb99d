"""How many send calls a KV transfer takes, and what they cost (FlowKV s3.3): pure.

PagedAttention keeps K and V per layer in fragmented blocks, layout (L, 2, B, H): a
layer-wise transfer sends every block of every layer's K and of its V on its own, 2 x L
x blocks calls per shard (FlowKV counts 23,469 per request for its baseline). FlowKV
reshapes to (B, L, 2, H), so a block is contiguous across layers (one call per block),
then merges adjacent blocks into segments, and ideally sends the whole KV in one call.

Modes (`network.transfer_mode`):
- contiguous: one call per shard (the default; every other experiment's);
- segment: one call per segment of `segment_blocks` blocks in the (B, L, 2, H) layout;
- block: one call per block per layer per K/V, the PagedAttention baseline.

Each call is a message with its own framing and completion, issued after the previous
one completed, so a transfer costs bytes / bandwidth + calls x per_call_s. per_call_s
is what the emulated fabric measures (benchmarks/bench_granularity.py).
"""

from __future__ import annotations

import math

MODES = ("contiguous", "segment", "block")


def blocks_of(tokens: int, block_tokens: int) -> int:
    if block_tokens <= 0:
        raise ValueError("block_tokens must be positive")
    return max(1, math.ceil(tokens / block_tokens))


def transfer_calls(mode: str, tokens: int, block_tokens: int, n_layers: int,
                   segment_blocks: int = 16) -> int:
    """Send calls per shard of one transfer of `tokens` tokens of KV."""
    if mode == "contiguous" or tokens <= 0:
        return 1
    blocks = blocks_of(tokens, block_tokens)
    if mode == "segment":
        return math.ceil(blocks / max(segment_blocks, 1))
    if mode == "block":
        return 2 * n_layers * blocks
    raise ValueError(f"unknown transfer mode {mode!r}; choose from {', '.join(MODES)}")


def call_overhead_s(calls: int, per_call_s: float) -> float:
    """Time the calls add to a transfer beyond its bytes (calls after the first)."""
    return max(calls - 1, 0) * per_call_s


def split_bytes(total: int, calls: int) -> list[int]:
    """Byte count of each call: as even as possible, summing exactly to `total`."""
    calls = max(1, min(calls, total)) if total > 0 else 1
    base, extra = divmod(total, calls)
    return [base + (1 if k < extra else 0) for k in range(calls)]
