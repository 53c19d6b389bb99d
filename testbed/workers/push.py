"""Pushing one request's KV to its decode instance: what a worker does on a decision.

Prefill workers do it for every request; a decode worker does it for a request it
prefilled while switched to prefill work (FlowKV) and that is decoded elsewhere. Runs on
its own thread: the KV streams must not hold up the worker's GPU loop.
"""

from __future__ import annotations

from testbed.workers import tcpinfo
from testbed.workers.kvstream import send_transfer


def push_kv(worker, msg: dict) -> None:
    """worker: has .scenario, .loop, .send, .levels (SenderLevels or None), .kv_pool
    (kept KV connections, or None) and .kv_engine (Mooncake's, or None)."""
    rid = msg["request"]
    levels = worker.levels
    marking = None
    if levels is not None:
        marking = levels.p2d(rid, float(msg["deadline"]), float(msg["bandwidth"]),
                             len(msg["wire"]))
    try:
        if worker.kv_engine is not None:  # Mooncake's Transfer Engine
            if not msg.get("endpoint"):
                raise ValueError(f"{msg['decode']} published no Transfer Engine endpoint")
            results = worker.kv_engine.send_transfer(msg["endpoint"], rid, list(msg["wire"]))
        else:
            results = send_transfer(msg["host"], int(msg["port"]), rid, list(msg["wire"]),
                                    congestion=worker.scenario.emulation.tcp_congestion,
                                    marking=marking, calls=int(msg.get("calls") or 1),
                                    pool=worker.kv_pool)
    except (OSError, ValueError) as exc:
        reason = f"KV transfer to {msg['decode']} failed: {exc}"
        worker.loop.post(lambda: worker.send({"type": "failed", "request": rid,
                                              "reason": reason, "decode": msg["decode"]}))
        return
    finally:
        if levels is not None:
            levels.done(rid)
    clock = worker.loop.clock
    shards = [{"shard": r.shard, "wire_bytes": r.bytes, "start": clock.to_modelled(r.start),
               "end": clock.to_modelled(r.end), "level_bytes": r.level_bytes or {},
               "tcp": _stalls(r.tcp, clock),
               "cpu_wait_s": None if r.cpu_wait is None else clock.span(r.cpu_wait)}
              for r in results]
    pruned = levels is not None and rid in levels.pruned
    worker.loop.post(lambda: worker.send({"type": "sent", "request": rid, "shards": shards,
                                          "pruned": pruned}))


def _stalls(tcp: dict | None, clock) -> dict:
    """What a transfer row keeps of its connection's TCP_INFO, durations modelled."""
    if not tcp:
        return {}
    out = {k: tcp.get(k) for k in tcpinfo.RECORDED + tcpinfo.ROUND_TRIPS}
    for k in ("timeout_s", *tcpinfo.ROUND_TRIPS):
        if out[k] is not None:
            out[k] = clock.span(out[k])
    return out
