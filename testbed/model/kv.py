"""KV-cache size (NetKV eq. 1) and effective transfer size after a prefix hit (eq. 2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KB = 1024


@dataclass(frozen=True)
class ModelSpec:
    """Attention shape of a served model: all that KV size depends on."""

    name: str
    n_layers: int
    n_kv_heads: int
    d_head: int
    bytes_per_elem: int = 2  # FP16/BF16

    def __post_init__(self) -> None:
        for field in ("n_layers", "n_kv_heads", "d_head", "bytes_per_elem"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive, got {getattr(self, field)}")


MODEL_PRESETS: dict[str, ModelSpec] = {
    # Llama-3-70B: GQA with 8 KV heads -> 320 KB/token aggregate, 80 KB/token per TP=4 shard.
    "llama-3-70b": ModelSpec("llama-3-70b", n_layers=80, n_kv_heads=8, d_head=128),
    # OPT-13B: plain multi-head attention, 40 heads -> 800 KB/token.
    "opt-13b": ModelSpec("opt-13b", n_layers=40, n_kv_heads=40, d_head=128),
}


def kv_bytes_per_token(model: ModelSpec) -> int:
    """Bytes of K and V for one token across all layers (eq. 1 with l_r = 1)."""
    return 2 * model.n_layers * model.n_kv_heads * model.d_head * model.bytes_per_elem


def kv_cache_bytes(model: ModelSpec, tokens: int) -> int:
    """s_r = 2 * n_layers * n_kv_heads * d_head * l_r * b_elem (eq. 1)."""
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    return kv_bytes_per_token(model) * tokens


def kv_shard_bytes(model: ModelSpec, tokens: int, tp: int) -> float:
    """Bytes one tensor-parallel shard holds: KV heads are split evenly across TP ranks."""
    if tp <= 0:
        raise ValueError(f"tp must be positive, got {tp}")
    return kv_cache_bytes(model, tokens) / tp


def effective_transfer_bytes(total_bytes: float, hit_tokens: int, length: int) -> float:
    """s_eff = s_r * (1 - lambda / l_r) (eq. 2): only the uncached suffix crosses the wire."""
    if length <= 0:
        raise ValueError(f"length must be positive, got {length}")
    low, high = (hit_tokens.min(), hit_tokens.max()) if isinstance(hit_tokens, np.ndarray) \
        else (hit_tokens, hit_tokens)
    if not 0 <= low <= high <= length:
        raise ValueError(f"hit_tokens must be in [0, {length}], got {hit_tokens}")
    return total_bytes * (1.0 - hit_tokens / length)
