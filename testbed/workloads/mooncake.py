"""Mooncake JSONL trace reader: one JSON object per line, errors name the line and field.

Fields: timestamp (ms from trace start), input_length, output_length, hash_ids (one
chained id per 512-token block, len == ceil(input_length / 512)).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from testbed.workloads.requests import Request


class TraceError(ValueError):
    """A trace line that cannot be used; the message names file, line and field."""


MAX_TS_MS = 1e11  # about three years of trace
MAX_TOKENS = 10_000_000  # a prompt or output longer than any model's context


def _field(obj: dict, name: str, where: str):
    if name not in obj:
        raise TraceError(f"{where}: missing field '{name}'")
    return obj[name]


def parse_line(text: str, where: str, index: int) -> Request:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    ts = _field(obj, "timestamp", where)
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not 0 <= ts <= MAX_TS_MS:
        raise TraceError(f"{where}: field 'timestamp' must be milliseconds in [0, "
                         f"{MAX_TS_MS:.0e}] (about three years), got {ts!r}")
    n_in = _field(obj, "input_length", where)
    if isinstance(n_in, bool) or not isinstance(n_in, int) or not 0 < n_in <= MAX_TOKENS:
        raise TraceError(f"{where}: field 'input_length' must be an integer in [1, "
                         f"{MAX_TOKENS:,}], got {n_in!r}")
    n_out = _field(obj, "output_length", where)
    if isinstance(n_out, bool) or not isinstance(n_out, int) or not 0 <= n_out <= MAX_TOKENS:
        raise TraceError(f"{where}: field 'output_length' must be an integer in [0, "
                         f"{MAX_TOKENS:,}], got {n_out!r}")
    ids = _field(obj, "hash_ids", where)
    if not isinstance(ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids
    ):
        raise TraceError(f"{where}: field 'hash_ids' must be a list of integers >= 0")
    if len(ids) > 2 * math.ceil(n_in / 512) + 16:
        raise TraceError(f"{where}: field 'hash_ids' has {len(ids)} ids for input_length "
                         f"{n_in} (one per 512-token block: {math.ceil(n_in / 512)})")
    if len(ids) < math.ceil(n_in / 512):
        raise TraceError(
            f"{where}: field 'hash_ids' has {len(ids)} ids but input_length {n_in} "
            f"needs {math.ceil(n_in / 512)} (one per 512-token block)"
        )
    return Request(
        request_id=f"r{index}",
        arrival_s=ts / 1000.0,
        input_len=n_in,
        output_len=max(1, n_out),  # at least the first token
        hash_ids=tuple(ids),
    )


def read_trace(path: str | Path) -> list[Request]:
    """Read a whole trace; the first bad line stops everything with its line number."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: trace file not found")
    out: list[Request] = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TraceError(f"{path}:{lineno}: not UTF-8 text (byte {exc.start})") from None
            if not line.strip():
                continue
            out.append(parse_line(line, f"{path}:{lineno}", len(out)))
    if not out:
        raise TraceError(f"{path}: trace holds no requests")
    for prev, cur in zip(out, out[1:], strict=False):
        if cur.arrival_s < prev.arrival_s:
            raise TraceError(f"{path}: timestamps go backwards at request {cur.request_id}")
    return out
