"""Prefill worker: a FIFO GPU that computes for T_prefill(l), then pushes the KV cache.

The queue is the flow simulator's PrefillInstance on real time. When the router's
decision for a finished request arrives, the KV goes to the chosen decode instance as
one TCP stream per TP shard, in parallel, AF41-marked (or, with priority levels, marked
per layer chunk by SenderLevels), each carrying its modelled shard size x the
emulation's scale factor; the instance meanwhile prefills the next request. With KV
reuse, the worker also receives fetched prefix KV from holders (on its own KV port) and
a request's prefill cannot end before its fetch has landed.
"""

from __future__ import annotations

import sys
import threading

from testbed.lifecycle import RequestState
from testbed.model.schedulers import switches_roles
from testbed.serving import PrefillInstance
from testbed.workers.background import BackgroundTraffic
from testbed.workers.decode_engine import DecodeEngine
from testbed.workers.kvstream import KVReceiver, ShardResult
from testbed.workers.levels import SenderLevels
from testbed.workers.push import push_kv
from testbed.workers.worker import Worker
from testbed.workloads.requests import Request


class PrefillWorker(Worker):
    role = "prefill"

    def __init__(self, cfg, instance: str):
        super().__init__(cfg, instance)
        scenario = self.scenario
        self.timing = scenario.timing_model()
        n_layers = scenario.model_spec().n_layers
        self.gpu = PrefillInstance(instance, self.timing, n_layers, self.loop, self._done,
                                   scenario.cluster.slowdown.get(instance, 1.0))
        bg = scenario.network.background
        self.background = BackgroundTraffic(
            scenario.cluster.spec(), instance, cfg.hosts[instance], cfg.hosts,
            cfg.bg_port, {1: bg.tier1, 2: bg.tier2, 3: bg.tier3}, cfg.scale, cfg.dilation)
        self.levels = (SenderLevels(scenario, self.loop, cfg.scale, n_layers)
                       if scenario.kv_levels() else None)
        self.fetch_bytes: dict[str, int] = {}  # request -> wire bytes of its landed fetch
        self.landed_early: set[str] = set()  # fetches that beat the router's prefill message
        self.reuse_tokens: dict[str, int] = {}
        self.engine: DecodeEngine | None = None  # decode work, once switched (FlowKV)
        self.receiver = None
        if scenario.reuse.enabled or switches_roles(cfg.scheduler):  # fetches, or P2D if switched
            self.receiver = KVReceiver(
                cfg.hosts[instance], cfg.kv_port,
                lambda r: self.loop.post(lambda: self._landed(r)),
                lambda why, rid: self.loop.post(lambda: self._fetch_failed(rid, why)))

    def on_start(self) -> None:
        if self.receiver is not None:
            self.receiver.start()
        if self.background.streams:
            self.background.start()

    def handle(self, msg: dict) -> None:
        if msg["type"] == "prefill":
            req = Request(msg["request"], float(msg["arrival"]), int(msg["input_len"]),
                          int(msg["output_len"]), tuple(msg["hash_ids"]))
            rs = RequestState(req=req, measured=False, kv_bytes=0.0)
            tokens = int(msg.get("reuse_tokens") or 0)
            self.reuse_tokens[req.request_id] = tokens
            self.gpu.enqueue(rs, self.loop.now, tokens, fetching=tokens > 0)
            if req.request_id in self.landed_early:
                self.gpu.fetched(req.request_id)
        elif msg["type"] == "role":
            if msg["role"] == "decode" and self.engine is None:
                self._become_hybrid()
        elif msg["type"] == "assign":
            self.engine.assign(msg)
        elif msg["type"] == "cancel":
            if self.engine is not None:
                self.engine.cancel(msg["request"])
        elif msg["type"] == "fetch_failed":
            self._fetch_failed(msg["request"], msg["reason"])
        elif msg["type"] == "surge":
            self.background.surge(int(msg["tier"]), float(msg["fraction"]),
                                  self.loop.clock.wall(float(msg["until"])))
        elif msg["type"] == "decision":
            threading.Thread(target=push_kv, args=(self, msg), daemon=True,
                             name=f"kv-{msg['request']}").start()

    def _done(self, rs: RequestState) -> None:
        rid = rs.req.request_id
        self.reuse_tokens.pop(rid, None)
        self.send({"type": "prefill_done", "request": rid, "instance": self.instance,
                   "start": rs.prefill_start, "end": self.loop.now,
                   "fetch_wire_bytes": self.fetch_bytes.pop(rid, 0),
                   "stall_s": self.gpu.stall_s})

    def _become_hybrid(self) -> None:
        """FlowKV switched this instance to decode work too: a decode engine on the same
        GPU (its prefills still come first), heartbeats, and a first state report."""
        self.engine = DecodeEngine(self)
        self.gpu.on_busy = self.engine.dec.hold
        self.send(self.engine.first_state())
        self.beat()

    def _landed(self, result: ShardResult) -> None:
        if result.stage == "reuse":
            self._fetched(result)
        elif self.engine is not None:
            self.engine.shard(result)
        else:
            print(f"{self.instance}: KV for {result.request} but no decode work here",
                  file=sys.stderr)

    def _fetched(self, result: ShardResult) -> None:
        rid = result.request
        self.fetch_bytes[rid] = result.bytes
        if rid in self.gpu.jobs:
            self.gpu.fetched(rid)
        else:
            self.landed_early.add(rid)

    def _fetch_failed(self, rid: str | None, why: str) -> None:
        """The holder died or its stream broke: compute the prefix here instead."""
        if rid is None or rid not in self.gpu.jobs:
            return
        print(f"{self.instance}: fetch for {rid} failed ({why}): recomputing its prefix",
              file=sys.stderr)
        tokens = self.reuse_tokens.get(rid, 0)
        self.gpu.fetch_failed(rid, self.timing.prefill_per_token_s * tokens)

    def shutdown(self) -> None:
        if self.receiver is not None:
            self.receiver.close()
        self.background.stop()
