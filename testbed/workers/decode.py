"""Decode worker: receives KV shard streams and runs continuous batching in real time.

The decode engine (batching, memory, cache, landing, reports) is DecodeEngine; this
worker adds the KV receiver, heartbeats for the router's failure detector, background
streams, KV-reuse fetches it serves as a holder, and prefill work when FlowKV switches
it (its own FIFO on the same GPU, holding the decode iterations back).
"""

from __future__ import annotations

import sys
import threading

from testbed.lifecycle import RequestState
from testbed.serving import PrefillInstance
from testbed.workers.background import BackgroundTraffic
from testbed.workers.decode_engine import DecodeEngine
from testbed.workers.kvstream import KVReceiver, send_transfer
from testbed.workers.levels import SenderLevels
from testbed.workers.push import push_kv
from testbed.workers.transfer_engine import EngineReceiver
from testbed.workers.worker import Worker
from testbed.workloads.build import build_workload, prewarm_placement
from testbed.workloads.requests import Request


class DecodeWorker(Worker):
    role = "decode"

    def __init__(self, cfg, instance: str):
        super().__init__(cfg, instance)
        scenario = self.scenario
        spec = scenario.cluster.spec()
        workload = build_workload(scenario, cfg.seed)
        placed = prewarm_placement(workload.history, [i.name for i in spec.decode_pool],
                                   cfg.seed)
        self.engine = DecodeEngine(self, placed[instance])
        self.dec = self.engine.dec
        self.receiver = (EngineReceiver(self.kv_engine, self._landed, self._broken)
                         if self.kv_engine else
                         KVReceiver(cfg.hosts[instance], cfg.kv_port, self._landed,
                                    self._broken))
        self.levels = (SenderLevels(scenario, self.loop, cfg.scale, scenario.model_spec().n_layers)
                       if scenario.kv_levels() else None)
        self.gpu: PrefillInstance | None = None  # prefill work, once switched (FlowKV)
        self.role_log: list[tuple[float, str]] = []
        bg = scenario.network.background
        self.background = BackgroundTraffic(
            spec, instance, cfg.hosts[instance], cfg.hosts, cfg.bg_port,
            {1: bg.tier1, 2: bg.tier2, 3: bg.tier3}, cfg.scale, cfg.dilation)

    def report(self) -> None:
        self.engine.report()

    def hello_extra(self) -> list[dict]:
        """The first state report, and where senders write KV when an engine moves it."""
        first = [self.engine.first_state()]
        if self.kv_engine is None:
            return first
        return [*first, {"type": "kv_endpoint", "instance": self.instance,
                         **self.kv_engine.endpoint()}]

    def on_start(self) -> None:
        self.receiver.start()
        if self.background.streams:
            self.background.start()
        self.beat()

    # -- events --------------------------------------------------------------------------
    def handle(self, msg: dict) -> None:
        kind = msg["type"]
        if kind == "assign":
            self.engine.assign(msg)
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
            self.engine.cancel(msg["request"])

    def _prefill(self, msg: dict) -> None:
        """Prefill work on this GPU (switched by the router's FlowKV controller): its own
        FIFO, which holds the decode iterations back while it computes."""
        if self.gpu is None:
            scenario = self.scenario
            self.gpu = PrefillInstance(self.instance, scenario.timing_model(),
                                       scenario.model_spec().n_layers, self.loop, self._prefilled,
                                       scenario.cluster.slowdown.get(self.instance, 1.0),
                                       on_busy=self.dec.hold)
        req = Request(msg["request"], float(msg["arrival"]), int(msg["input_len"]),
                      int(msg["output_len"]), tuple(msg["hash_ids"]))
        self.gpu.enqueue(RequestState(req=req, measured=False, kv_bytes=0.0),
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
                                    marking=(lambda _k: marking) if marking else None,
                                    stage="reuse", pool=self.kv_pool)
        except (OSError, ValueError) as exc:
            print(f"{self.instance}: fetch {rid} failed: {exc}", file=sys.stderr)
            return
        shards = [{"shard": r.shard, "wire_bytes": r.bytes, "level_bytes": r.level_bytes or {}}
                  for r in results]
        self.loop.post(lambda: self.send({"type": "sent", "request": rid, "shards": shards,
                                          "stage": "reuse"}))

    def _landed(self, result) -> None:  # a receiver's thread
        self.loop.post(lambda: self.engine.shard(result))

    def _broken(self, why: str, _rid: str | None) -> None:  # a receiver's thread
        self.loop.post(lambda: self._bad_stream(why))

    def _bad_stream(self, why: str) -> None:
        self.send({"type": "heartbeat", "instance": self.instance, "time": self.loop.now,
                   "error": f"bad KV stream: {why}"})

    def shutdown(self) -> None:
        self.receiver.close()
        self.background.stop()
