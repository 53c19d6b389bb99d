"""The request record both engines replay."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    request_id: str
    arrival_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...]  # one id per 512-token block (Mooncake convention)
