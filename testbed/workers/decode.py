"""Decode worker: receives KV shard streams and runs continuous batching in real time.

The batching, memory and prefix-cache logic is the flow simulator's DecodeInstance,
driven by a RealTimeLoop: a request is admitted at an iteration boundary once every
shard of its KV has landed, its first token comes at the end of its first iteration,
and it leaves after output_len iterations. The worker reports to the router what a real
decode engine would: transfer completion (kv_done: the router decrements NetKV's
in-flight counter on it), first token, completion, and its state (free memory, queue,
batch, cache blocks added and evicted) after every change.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from testbed.flowsim.serving import DecodeInstance, PrefillInstance
from testbed.lifecycle import RequestState
from testbed.model.cache import PrefixCache, block_keys
from testbed.model.kv import kv_bytes_per_token
from testbed.workers.background import BackgroundTraffic
from testbed.workers.base import Worker
from testbed.workers.kvstream import KVReceiver, ShardResult, send_transfer
from testbed.workers.levels import SenderLevels
from testbed.workers.push import push_kv
from testbed.workloads.build import build_workload, prewarm_placement
from testbed.workloads.requests import Request

GB = 1e9


@dataclass
class Landing:
    shards: int = 0
    wire_bytes: int = 0
    start: float = float("inf")
    end: float = 0.0


class DecodeWorker(Worker):
    role = "decode"

    def __init__(self, cfg, instance: str):
        super().__init__(cfg, instance)
        sc = self.scenario
        spec = sc.cluster.spec()
        block_tokens = sc.workload.block_tokens
        cache = PrefixCache(block_tokens, kv_bytes_per_token(sc.model_spec()) * block_tokens)
        self.dec = DecodeInstance(instance, self.loop, sc.timing_model(), sc.cluster.beta_max,
                                  sc.cluster.memory_gb * GB, cache, self._completed,
                                  self._first_token)
        workload = build_workload(sc, cfg.seed)
        placed = prewarm_placement(workload.history, [i.name for i in spec.decode_pool],
                                   cfg.seed)
        self.dec.prewarm(placed[instance])
        cache.record_changes()  # the first state report carries the whole prewarmed cache
        self.initial_keys = cache.keys()
        self.assigned: dict[str, RequestState] = {}
        self.shards: dict[str, int] = {}
        self.landing: dict[str, Landing] = {}
        self.seq_seen = 0
        self.recompute_free = 0.0
        self.receiver = KVReceiver(cfg.hosts[instance], cfg.kv_port,
                                   lambda r: self.loop.post(lambda: self._shard(r)),
                                   lambda why, _rid: self.loop.post(lambda: self._bad_stream(why)))
        self.levels = (SenderLevels(sc, self.loop, cfg.scale, sc.model_spec().n_layers)
                       if sc.kv_levels() else None)
        self.gpu: PrefillInstance | None = None  # prefill work, once switched (FlowKV)
        self.role_log: list[tuple[float, str]] = []
        bg = sc.network.background
        self.background = BackgroundTraffic(
            spec, instance, cfg.hosts[instance], cfg.hosts, cfg.bg_port,
            {1: bg.tier1, 2: bg.tier2, 3: bg.tier3}, cfg.scale, cfg.dilation)

    # -- reports -----------------------------------------------------------------------
    def _state(self, added=None, removed=None) -> dict:
        if added is None:
            added, removed = self.dec.cache.drain_changes()
        d = self.dec
        return {"type": "state", "instance": self.instance, "free_memory": d.free_memory,
                "queued": d.queued, "batch": d.batch_size, "time": self.loop.now,
                "seq": self.seq_seen, "added": added, "removed": removed}

    def report(self) -> None:
        self.send(self._state())

    def hello_extra(self) -> list[dict]:
        self.dec.cache.drain_changes()
        return [self._state(self.initial_keys, [])]

    def on_start(self) -> None:
        self.receiver.start()
        if self.background.streams:
            self.background.start()
        self._beat()

    def _beat(self) -> None:
        """The liveness signal the router's failure detector counts (recovery.heartbeat_s)."""
        self.send({"type": "heartbeat", "instance": self.instance, "time": self.loop.now})
        self.loop.after(self.scenario.recovery.heartbeat_s, self._beat)

    # -- events --------------------------------------------------------------------------
    def handle(self, msg: dict) -> None:
        kind = msg["type"]
        if kind == "assign":
            self._assign(msg)
        elif kind == "surge":
            self.background.surge(int(msg["tier"]), float(msg["fraction"]),
                                  self.loop.clock.wall(float(msg["until"])))
        elif kind == "role":  # FlowKV: take prefill work (or stop taking it)
            self.role_log.append((self.loop.now, msg["role"]))
        elif kind == "prefill":
            self._prefill(msg)
        elif kind == "decision":  # a request it prefilled goes to another decode instance
            threading.Thread(target=push_kv, args=(self, msg), daemon=True,
                             name=f"kv-{msg['request']}").start()
        elif kind == "fetch":
            threading.Thread(target=self._send_fetch, args=(msg,), daemon=True,
                             name=f"fetch-{msg['request']}").start()
        elif kind == "cancel":
            rs = self.assigned.pop(msg["request"], None)
            if rs is not None:
                self.dec.cancel(rs)
                self.report()

    def _assign(self, msg: dict) -> None:
        sc = self.scenario
        rid = msg["request"]
        req = Request(rid, 0.0, int(msg["input_len"]), int(msg["output_len"]),
                      tuple(msg["hash_ids"]))
        rs = RequestState(req=req, measured=False,
                          keys=block_keys(req.hash_ids, req.input_len, sc.workload.block_tokens),
                          kv_bytes=0.0)
        rs.eff_bytes = float(msg["bytes"])
        rs.hit_tokens = int(msg["hit_tokens"])
        self.dec.assign(rs, rs.hit_tokens // sc.workload.block_tokens, float(msg["output_bytes"]))
        self.seq_seen = max(self.seq_seen, int(msg["seq"]))
        self.assigned[rid] = rs
        self.shards[rid] = int(msg["shards"])
        self.report()
        recompute_s = float(msg.get("recompute_s") or 0.0)
        if recompute_s > 0:  # KVRS recompute: this GPU reruns the prefill, in its own FIFO
            start = max(self.loop.now, self.recompute_free)
            self.recompute_free = start + recompute_s
            self.loop.at(self.recompute_free, lambda: self._recomputed(rid, start))
            return
        if self.shards[rid] == 0:  # prefilled here (FlowKV): the KV is already in place
            self._recomputed(rid, self.loop.now)
            return
        self._maybe_landed(rid)

    def _prefill(self, msg: dict) -> None:
        """Prefill work on this GPU (switched by the router's FlowKV controller): its own
        FIFO, which holds the decode iterations back while it computes."""
        if self.gpu is None:
            sc = self.scenario
            self.gpu = PrefillInstance(self.instance, sc.timing_model(),
                                       sc.model_spec().n_layers, self.loop, self._prefilled,
                                       sc.cluster.slowdown.get(self.instance, 1.0),
                                       on_busy=self.dec.hold)
        req = Request(msg["request"], float(msg["arrival"]), int(msg["input_len"]),
                      int(msg["output_len"]), tuple(msg["hash_ids"]))
        self.gpu.enqueue(RequestState(req=req, measured=False, keys=[], kv_bytes=0.0),
                         self.loop.now)

    def _prefilled(self, rs: RequestState) -> None:
        self.send({"type": "prefill_done", "request": rs.req.request_id,
                   "instance": self.instance, "start": rs.prefill_start, "end": self.loop.now,
                   "stall_s": self.gpu.stall_s})

    def _send_fetch(self, msg: dict) -> None:
        """KV reuse: stream a cached prefix to the prefill instance that reuses it (its
        own thread, like a prefill's push). A failure is the receiver's to notice."""
        rid = msg["request"]
        marking = None
        if self.levels is not None:
            marking = self.levels.fetch(rid, float(msg["expected_start"]),
                                        float(msg["layer_s"]), float(msg["bandwidth"]))
        try:
            results = send_transfer(msg["host"], int(msg["port"]), rid, list(msg["wire"]),
                                    congestion=self.scenario.emulation.tcp_congestion,
                                    marking=(lambda _k: marking) if marking else None)
        except (OSError, ValueError) as exc:
            print(f"{self.instance}: fetch {rid} failed: {exc}", file=sys.stderr)
            return
        shards = [{"shard": r.shard, "wire_bytes": r.bytes, "level_bytes": r.level_bytes or {}}
                  for r in results]
        self.loop.post(lambda: self.send({"type": "sent", "request": rid, "shards": shards,
                                          "stage": "reuse"}))

    def _recomputed(self, rid: str, start: float) -> None:
        rs = self.assigned.get(rid)
        if rs is None:
            return
        self.dec.kv_landed(rs)
        self.send({"type": "kv_done", "request": rid, "decode": self.instance, "bytes": 0,
                   "start": start, "end": self.loop.now})
        self.report()

    def _shard(self, result: ShardResult) -> None:
        land = self.landing.setdefault(result.request, Landing())
        land.shards += 1
        land.wire_bytes += result.bytes
        land.start = min(land.start, self.loop.clock.to_modelled(result.start))
        land.end = max(land.end, self.loop.clock.to_modelled(result.end))
        self._maybe_landed(result.request)

    def _maybe_landed(self, rid: str) -> None:
        land, rs = self.landing.get(rid), self.assigned.get(rid)
        if land is None or rs is None or land.shards < self.shards[rid]:
            return  # shards can land before the router's assign message arrives
        del self.landing[rid]
        self.dec.kv_landed(rs)
        self.send({"type": "kv_done", "request": rid, "decode": self.instance,
                   "bytes": land.wire_bytes, "start": land.start, "end": self.loop.now})
        self.report()

    def _bad_stream(self, why: str) -> None:
        self.send({"type": "heartbeat", "instance": self.instance, "time": self.loop.now,
                   "error": f"bad KV stream: {why}"})

    def _first_token(self, rs: RequestState) -> None:
        self.send({"type": "first_token", "request": rs.req.request_id, "time": rs.first_token,
                   "instance": self.instance})
        self.report()  # admission moved it from the queue into the batch

    def _completed(self, rs: RequestState) -> None:
        self.assigned.pop(rs.req.request_id, None)
        self.shards.pop(rs.req.request_id, None)
        self.send({"type": "complete", "request": rs.req.request_id, "time": rs.done,
                   "entry_iter_s": rs.entry_iter_s, "instance": self.instance})
        self.report()

    def shutdown(self) -> None:
        self.receiver.close()
        self.background.stop()
