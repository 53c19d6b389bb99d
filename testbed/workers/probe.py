"""Calibration probe: lone KV transfers between two emulated hosts, timed end to end.

`python -m testbed.workers.probe recv IP PORT` accepts KV streams until terminated;
`python -m testbed.workers.probe send HOST PORT SHARDS CC BYTES [BYTES ...]` sends one
transfer per BYTES (wire bytes, split over SHARDS parallel AF41 streams), one after the
other, and prints a JSON line per transfer: wire bytes and seconds from the first
connect to the last acknowledgement, exactly what an emulated KV transfer measures, and
each shard's end ("shards", seconds from the same start).
`python -m testbed.workers.probe compete HOST PORT SHARDS CC BYTES N[@S] [N[@S] ...]`
starts N transfers of BYTES per N value (competing on one path), at once or each S
seconds after the previous, and prints {bytes, competing, starts, seconds: [one per
transfer, from the first start], tcp: [its shards' resent segments, retransmission
timeouts and seconds in them, and their senders' seconds busy, limited by the receive
window and by the send buffer and segments sent (tcpinfo.LIMITS), per transfer]}.
`python -m testbed.workers.probe calls HOST PORT CC BYTES CALLS [CALLS ...]` sends one
shard of BYTES per CALLS value as that many framed, acknowledged send calls (transfer
granularity, FlowKV) and prints {bytes, calls, seconds} per shard. The receiver prints
{request, bytes} for every shard that lands, after its "ready" line.
`--keep` before the mode: senders keep their connections between transfers
(emulation.kv_connections: persistent), opened by an untimed transfer of one byte per
shard (as many at once as the next set needs) before the timed ones, as a run's warm-up
opens them.
`--engine listen` before `recv` (`recv IP KV_PORT`), `--engine ENDPOINT` before `send` or
`compete` (HOST and PORT then the sender's own address and KV_PORT): the KV moves through
Mooncake's Transfer Engine (emulation.kv_transport: mooncake, workers/transfer_engine.py); the
receiver's "ready" line then carries its ENDPOINT (JSON), and a transfer ends when the
engine's last write is acknowledged, as a run's do.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable

from testbed.workers import tcpinfo
from testbed.workers.kvstream import (
    ConnectionPool,
    KVReceiver,
    ShardResult,
    send_shard,
    send_transfer,
)

Send = Callable[[str, list[int]], list[ShardResult]]  # (name, shard sizes) -> results


def _compete(send: Send, name: str, sizes: list[int], n: int, spacing: float = 0.0
             ) -> tuple[list[float], list[float], list[dict]]:
    """n transfers, started together or `spacing` seconds apart; each one's start and end
    in seconds from the first start and its shards' TCP stalls summed (segments resent,
    retransmission timeouts)."""
    starts: list[float] = [0.0] * n
    ends: list[float] = [0.0] * n
    stalls: list[dict] = [{}] * n
    t0 = time.time()

    def one(j: int) -> None:
        delay = t0 + j * spacing - time.time()
        if delay > 0:
            time.sleep(delay)  # the probe's schedule: transfer j starts j spacings in
        starts[j] = time.time() - t0
        results = send(f"{name}-{j}", sizes)
        ends[j] = max(r.end for r in results) - t0
        stalls[j] = {k: sum((r.tcp or {}).get(k) or 0 for r in results)
                     for k in (*tcpinfo.RECORDED, *tcpinfo.LIMITS)}
        rtts = [r.tcp["rtt_s"] for r in results if r.tcp and r.tcp.get("rtt_s") is not None]
        stalls[j]["rtt_s"] = max(rtts, default=None)  # the longest of its shards', wall
    threads = [threading.Thread(target=one, args=(j,)) for j in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return starts, ends, stalls


def _warm(host: str, port: int, shards: int, n: int, cc: str,
          pool: ConnectionPool | None, engine=None, send: Send | None = None) -> None:
    """Open n transfers' worth of kept connections (nothing when not keeping); through
    the engine, n one-byte transfers at once open its lanes to the receiver."""
    if engine is not None:
        if pool is not None:
            _compete(send, "warm", [1] * shards, n)
    elif pool is not None:
        pool.keep_open(host, port, shards, n, cc)


def _receive(argv: list[str], engine_mode: str | None, keep: bool) -> int:
    """Accept shards until terminated, a JSON line per landed shard after "ready"."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def landed(r: ShardResult) -> None:
        print(json.dumps({"request": r.request, "bytes": r.bytes}), flush=True)

    if engine_mode is not None:
        from testbed.workers.transfer_engine import EngineReceiver, KVEngine

        engine = KVEngine(argv[1], int(argv[2]), keep)
        receiver = EngineReceiver(engine, landed, lambda _why, _rid: None).start()
        print("ready", json.dumps(engine.endpoint()), flush=True)
    else:
        receiver = KVReceiver(argv[1], int(argv[2]), landed).start()
        print("ready", flush=True)
    stop.wait()
    receiver.close()
    return 0


def _sender(argv: list[str], endpoint: str | None, pool: ConnectionPool | None):
    """(engine or None, send) for `send`/`compete` HOST PORT SHARDS CC ..."""
    host, port, cc = argv[1], int(argv[2]), argv[4]
    if endpoint is None:
        return None, lambda name, sizes: send_transfer(host, port, name, sizes,
                                                       congestion=cc, pool=pool)
    from testbed.workers.transfer_engine import KVEngine

    engine, where = KVEngine(host, port, pool is not None), json.loads(endpoint)
    return engine, lambda name, sizes: engine.send_transfer(where, name, sizes)


def main(argv: list[str]) -> int:
    pool = ConnectionPool() if argv[:1] == ["--keep"] else None
    argv = argv[1:] if pool is not None else argv
    engine_mode = None
    if argv[:1] == ["--engine"] and len(argv) > 1:
        engine_mode, argv = argv[1], argv[2:]
    if len(argv) == 3 and argv[0] == "recv":
        return _receive(argv, engine_mode, pool is not None)
    if len(argv) >= 6 and argv[0] == "send":
        host, port, shards, cc = argv[1], int(argv[2]), int(argv[3]), argv[4]
        engine, send = _sender(argv, engine_mode, pool)
        _warm(host, port, shards, 1, cc, pool, engine, send)
        for k, total in enumerate(int(b) for b in argv[5:]):
            sizes = [total // shards + (1 if i < total % shards else 0) for i in range(shards)]
            t0 = time.time()
            results = send(f"probe{k}", sizes)
            print(json.dumps({"bytes": total, "seconds": max(r.end for r in results) - t0,
                              "shards": [r.end - t0 for r in results]}), flush=True)
        return 0
    if len(argv) >= 7 and argv[0] == "compete":
        host, port, shards, cc, total = argv[1], int(argv[2]), int(argv[3]), argv[4], int(argv[5])
        engine, send = _sender(argv, engine_mode, pool)
        sizes = [total // shards + (1 if i < total % shards else 0) for i in range(shards)]
        for k, arg in enumerate(argv[6:]):
            n, _, spacing = arg.partition("@")
            _warm(host, port, shards, int(n), cc, pool, engine, send)
            starts, ends, stalls = _compete(send, f"compete{k}", sizes, int(n),
                                            float(spacing or 0.0))
            print(json.dumps({"bytes": total, "competing": int(n), "starts": starts,
                              "seconds": ends, "tcp": stalls}), flush=True)
        return 0
    if len(argv) >= 6 and argv[0] == "calls":
        host, port, cc, size = argv[1], int(argv[2]), argv[3], int(argv[4])
        for k, calls in enumerate(int(c) for c in argv[5:]):
            if pool is not None:  # the calls mode's own connection
                send_shard(host, port, "warm", 0, 1, calls, congestion=cc, calls=calls, pool=pool)
            t0 = time.time()
            r = send_shard(host, port, f"calls{k}", 0, 1, size, congestion=cc, calls=calls,
                           pool=pool)
            print(json.dumps({"bytes": r.bytes, "calls": calls, "seconds": r.end - t0}),
                  flush=True)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
