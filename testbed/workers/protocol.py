"""Worker protocol: length-prefixed JSON control messages, and the KV stream header.

Control messages (router <-> workers, over Unix sockets: see channel.py) are a 4-byte
big-endian length followed by a JSON object with a `type` and that type's fields. KV streams (one
TCP connection per TP shard, AF41-marked) start with MAGIC, a 2-byte header length and a
JSON header {request, shard, shards, bytes[, calls]}, then exactly `bytes` bytes of
payload: raw, or with calls > 1 as that many framed, individually acknowledged messages.
Every malformed input raises ProtocolError naming what is wrong.
"""

from __future__ import annotations

import json
import struct

MAGIC = b"NKV1"
MAX_MESSAGE = 1 << 20
MAX_HEADER = 4096

REQUIRED = {
    # every worker -> router, first message on its connection
    "hello": ("role", "instance"),
    # load generator -> router
    "request": ("request", "input_len", "output_len", "hash_ids", "arrival"),
    "loadgen_done": ("count",),
    # router -> prefill worker, and back
    "prefill": ("request", "input_len", "output_len", "hash_ids", "arrival"),
    "prefill_done": ("request", "instance", "start", "end"),
    # router -> the decode instance holding a prompt's cached prefix: send it to the
    # prefill (KV reuse); router -> prefill: that fetch will not come
    "fetch": ("request", "host", "port", "wire", "expected_start", "layer_s", "bandwidth"),
    "fetch_failed": ("request", "reason"),
    # router -> decode worker (FlowKV): take prefill work, or stop taking it
    "role": ("instance", "role"),
    # router -> prefill (send the KV) and -> decode (expect it, reserve memory)
    "decision": ("request", "decode", "tier", "bytes", "host", "port", "wire", "deadline",
                 "bandwidth"),
    "assign": ("request", "seq", "input_len", "output_len", "hash_ids", "hit_tokens",
               "bytes", "output_bytes", "shards"),
    "reject": ("request", "reason"),
    "cancel": ("request", "reason"),
    # prefill -> router once every shard is acknowledged
    "sent": ("request", "shards"),
    # decode -> router
    "kv_done": ("request", "decode", "bytes", "start", "end"),
    # decode -> router after hello when Mooncake's Transfer Engine moves KV: where
    # senders write (its session "ip:port" and registered buffer); decisions carry it
    "kv_endpoint": ("instance", "session", "addr", "capacity", "notice"),
    "state": ("instance", "free_memory", "queued", "batch", "time"),
    "first_token": ("request", "time"),
    "complete": ("request", "time"),
    "failed": ("request", "reason"),
    "heartbeat": ("instance", "time"),
    # router -> a worker on another machine: a clock probe, answered with the same
    # `sent` plus the worker's `instance` and `wall` (clock.clock_sample)
    "clock": ("sent",),
    # router -> every worker: modelled time zero is wall clock t0; the run is over
    "start": ("t0",),
    "stop": (),
    # router -> instance workers: a background surge on a tier until a modelled time
    "surge": ("tier", "fraction", "until"),
}


class ProtocolError(ValueError):
    pass


def validate(msg: dict) -> dict:
    if not isinstance(msg, dict):
        raise ProtocolError(f"a message must be a JSON object, got {type(msg).__name__}")
    kind = msg.get("type")
    if kind not in REQUIRED:
        raise ProtocolError(f"unknown message type {kind!r}; known: {', '.join(REQUIRED)}")
    missing = [f for f in REQUIRED[kind] if f not in msg]
    if missing:
        raise ProtocolError(f"'{kind}' message lacks field(s) {', '.join(missing)}")
    return msg


def encode(msg: dict) -> bytes:
    body = json.dumps(validate(msg), separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(body)} bytes exceeds {MAX_MESSAGE}")
    return struct.pack("!I", len(body)) + body


def read_exact(recv, n: int) -> bytes:
    """Read n bytes with recv(n) -> bytes; b'' at the start means a clean end of stream."""
    buf = bytearray()
    while len(buf) < n:
        chunk = recv(n - len(buf))
        if not chunk:
            if buf:
                raise ProtocolError(f"stream ended after {len(buf)} of {n} bytes")
            return b""
        buf += chunk
    return bytes(buf)


def read_message(recv) -> dict | None:
    """The next control message, or None at a clean end of stream."""
    head = read_exact(recv, 4)
    if not head:
        return None
    (length,) = struct.unpack("!I", head)
    if length > MAX_MESSAGE:
        raise ProtocolError(f"message length {length} exceeds {MAX_MESSAGE}")
    body = read_exact(recv, length)
    if len(body) != length:
        raise ProtocolError("stream ended inside a message")
    try:
        return validate(json.loads(body))
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"message is not JSON: {exc.msg}") from None


def kv_header(request: str, shard: int, shards: int, size: int, calls: int = 1,
              stage: str = "p2d", keep: bool = False) -> bytes:
    """calls > 1: the payload follows as that many framed messages (4-byte length, then
    the bytes), each acknowledged before the next (granularity.py's send calls).
    stage "reuse": a KV-reuse fetch, not a P2D transfer (a worker may receive both).
    keep: the connection stays open for the sender's next shard (a pooled connection)."""
    if size < 0 or not 0 <= shard < shards or calls < 1:
        raise ProtocolError(f"bad shard {shard}/{shards}, size {size} or calls {calls}")
    head = {"request": request, "shard": shard, "shards": shards, "bytes": size}
    if calls > 1:
        head["calls"] = calls
    if stage != "p2d":
        head["stage"] = stage
    if keep:
        head["keep"] = True
    body = json.dumps(head).encode()
    return MAGIC + struct.pack("!H", len(body)) + body


def read_kv_header(recv, end_ok: bool = False) -> dict | None:
    """The next shard's header; None at a clean end of stream where `end_ok` (a kept
    connection closed between shards)."""
    magic = read_exact(recv, 4)
    if not magic and end_ok:
        return None
    if magic != MAGIC:
        raise ProtocolError(f"not a KV stream (magic {magic!r}, expected {MAGIC!r})")
    (length,) = struct.unpack("!H", read_exact(recv, 2))
    if length > MAX_HEADER:
        raise ProtocolError(f"KV header of {length} bytes exceeds {MAX_HEADER}")
    try:
        head = json.loads(read_exact(recv, length))
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"KV header is not JSON: {exc.msg}") from None
    for key in ("request", "shard", "shards", "bytes"):
        if key not in head:
            raise ProtocolError(f"KV header lacks '{key}'")
    if not isinstance(head["bytes"], int) or head["bytes"] < 0:
        raise ProtocolError(f"KV header 'bytes' must be an integer >= 0, got {head['bytes']!r}")
    calls = head.get("calls", 1)
    if not isinstance(calls, int) or calls < 1:
        raise ProtocolError(f"KV header 'calls' must be an integer >= 1, got {calls!r}")
    return head
