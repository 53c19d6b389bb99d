"""A decode engine inside a worker: continuous batching on real time, KV landing, reports.

The batching, memory and prefix-cache logic is the flow simulator's DecodeInstance,
driven by the worker's RealTimeLoop: a request is admitted at an iteration boundary once
every shard of its KV has landed, its first token comes at the end of its first
iteration, and it leaves after output_len iterations. The engine reports what a real
decode engine would: transfer completion (kv_done), first token, completion, and its
state (free memory, queue, batch, cache blocks added and evicted) after every change.
Every decode worker has one; a prefill worker gets one when FlowKV switches it to
decode work.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.lifecycle import RequestState
from testbed.model.cache import PrefixCache
from testbed.model.kv import kv_bytes_per_token
from testbed.serving import DecodeInstance
from testbed.workers.kvstream import ShardResult
from testbed.workloads.requests import Request

GB = 1e9


@dataclass
class Landing:
    shards: int = 0
    wire_bytes: int = 0
    start: float = float("inf")
    end: float = 0.0


class DecodeEngine:
    def __init__(self, worker, prewarm: list[Request] | None = None):
        """worker: has .scenario, .loop, .send and .instance."""
        self.w = worker
        scenario = worker.scenario
        block_tokens = scenario.workload.block_tokens
        cache = PrefixCache(block_tokens, kv_bytes_per_token(scenario.model_spec()) * block_tokens)
        self.dec = DecodeInstance(worker.instance, worker.loop, scenario.timing_model(),
                                  scenario.cluster.beta_max, scenario.cluster.memory_gb * GB, cache,
                                  self._completed, self._first_token)
        if prewarm:
            self.dec.prewarm(prewarm)
        cache.record_changes()  # the first state report carries the whole prewarmed cache
        self.initial_keys = cache.keys()
        self.assigned: dict[str, RequestState] = {}
        self.shards: dict[str, int] = {}
        self.landing: dict[str, Landing] = {}
        self.seq_seen = 0
        self.recompute_free = 0.0

    # -- reports -----------------------------------------------------------------------
    def state(self, added=None, removed=None) -> dict:
        if added is None:
            added, removed = self.dec.cache.drain_changes()
        d = self.dec
        return {"type": "state", "instance": self.w.instance, "free_memory": d.free_memory,
                "queued": d.queued, "batch": d.batch_size, "time": self.w.loop.now,
                "seq": self.seq_seen, "added": added, "removed": removed}

    def first_state(self) -> dict:
        self.dec.cache.drain_changes()
        return self.state(self.initial_keys, [])

    def report(self) -> None:
        self.w.send(self.state())

    # -- the router's messages -----------------------------------------------------------
    def assign(self, msg: dict) -> None:
        scenario, loop = self.w.scenario, self.w.loop
        rid = msg["request"]
        req = Request(rid, 0.0, int(msg["input_len"]), int(msg["output_len"]),
                      tuple(msg["hash_ids"]))
        rs = RequestState(req=req, measured=False, kv_bytes=0.0)
        rs.eff_bytes = float(msg["bytes"])
        rs.hit_tokens = int(msg["hit_tokens"])
        self.dec.assign(rs, rs.hit_tokens // scenario.workload.block_tokens, float(msg["output_bytes"]))
        self.seq_seen = max(self.seq_seen, int(msg["seq"]))
        self.assigned[rid] = rs
        self.shards[rid] = int(msg["shards"])
        self.report()
        recompute_s = float(msg.get("recompute_s") or 0.0)
        if recompute_s > 0:  # KVRS recompute: this GPU reruns the prefill, in its own FIFO
            start = max(loop.now, self.recompute_free)
            self.recompute_free = start + recompute_s
            loop.at(self.recompute_free, lambda: self._in_place(rid, start))
            return
        if self.shards[rid] == 0:  # prefilled here (FlowKV): the KV is already in place
            self._in_place(rid, loop.now)
            return
        self._maybe_landed(rid)

    def cancel(self, rid: str) -> None:
        rs = self.assigned.pop(rid, None)
        if rs is not None:
            self.dec.cancel(rs)
            self.report()

    def shard(self, result: ShardResult) -> None:
        clock = self.w.loop.clock
        land = self.landing.setdefault(result.request, Landing())
        land.shards += 1
        land.wire_bytes += result.bytes
        land.start = min(land.start, clock.to_modelled(result.start))
        land.end = max(land.end, clock.to_modelled(result.end))
        self._maybe_landed(result.request)

    # -- internals -------------------------------------------------------------------------
    def _in_place(self, rid: str, start: float) -> None:
        """KV that needs no transfer (recomputed here, or prefilled here) is ready."""
        rs = self.assigned.get(rid)
        if rs is None:
            return
        self.dec.kv_landed(rs)
        self.w.send({"type": "kv_done", "request": rid, "decode": self.w.instance, "bytes": 0,
                     "start": start, "end": self.w.loop.now})
        self.report()

    def _maybe_landed(self, rid: str) -> None:
        land, rs = self.landing.get(rid), self.assigned.get(rid)
        if land is None or rs is None or land.shards < self.shards[rid]:
            return  # shards can land before the router's assign message arrives
        del self.landing[rid]
        self.dec.kv_landed(rs)
        self.w.send({"type": "kv_done", "request": rid, "decode": self.w.instance,
                     "bytes": land.wire_bytes, "start": land.start, "end": self.w.loop.now})
        self.report()

    def _first_token(self, rs: RequestState) -> None:
        self.w.send({"type": "first_token", "request": rs.req.request_id,
                     "time": rs.first_token, "instance": self.w.instance})
        self.report()  # admission moved it from the queue into the batch

    def _completed(self, rs: RequestState) -> None:
        self.assigned.pop(rs.req.request_id, None)
        self.shards.pop(rs.req.request_id, None)
        self.w.send({"type": "complete", "request": rs.req.request_id, "time": rs.done,
                     "entry_iter_s": rs.entry_iter_s, "instance": self.w.instance})
        self.report()
