"""Prefill worker: a FIFO GPU that computes for T_prefill(l), then pushes the KV cache.

The queue is the flow simulator's PrefillInstance on real time. When the router's
decision for a finished request arrives, the KV goes to the chosen decode instance as
one TCP stream per TP shard, in parallel, AF41-marked, each carrying its modelled shard
size x the emulation's scale factor; the instance meanwhile prefills the next request.
"""

from __future__ import annotations

import threading

from testbed.flowsim.serving import PrefillInstance
from testbed.lifecycle import RequestState
from testbed.workers.background import BackgroundTraffic
from testbed.workers.base import Worker
from testbed.workers.kvstream import send_transfer
from testbed.workloads.requests import Request


class PrefillWorker(Worker):
    role = "prefill"

    def __init__(self, cfg, instance: str):
        super().__init__(cfg, instance)
        self.gpu = PrefillInstance(instance, self.scenario.timing_model())
        bg = self.scenario.network.background
        self.background = BackgroundTraffic(
            self.scenario.cluster.spec(), instance, cfg.hosts[instance], cfg.hosts,
            cfg.bg_port, {1: bg.tier1, 2: bg.tier2, 3: bg.tier3}, cfg.scale, cfg.dilation)

    def on_start(self) -> None:
        if self.background.streams:
            self.background.start()

    def handle(self, msg: dict) -> None:
        if msg["type"] == "prefill":
            req = Request(msg["request"], float(msg["arrival"]), int(msg["input_len"]),
                          int(msg["output_len"]), tuple(msg["hash_ids"]))
            rs = RequestState(req=req, measured=False, keys=[], kv_bytes=0.0)
            end = self.gpu.enqueue(rs, self.loop.now)
            self.loop.at(end, lambda: self.send({
                "type": "prefill_done", "request": req.request_id, "instance": self.instance,
                "start": rs.prefill_start, "end": self.loop.now}))
        elif msg["type"] == "surge":
            self.background.surge(int(msg["tier"]), float(msg["fraction"]),
                                  self.loop.clock.wall(float(msg["until"])))
        elif msg["type"] == "decision":
            threading.Thread(target=self._push, args=(msg,), daemon=True,
                             name=f"kv-{msg['request']}").start()

    def _push(self, msg: dict) -> None:
        """Runs on its own thread: the KV streams must not hold up the next prefill."""
        rid = msg["request"]
        try:
            results = send_transfer(msg["host"], int(msg["port"]), rid, list(msg["wire"]),
                                    congestion=self.scenario.emulation.tcp_congestion)
        except (OSError, ValueError) as exc:
            reason = f"KV transfer to {msg['decode']} failed: {exc}"
            self.loop.post(lambda: self.send({"type": "failed", "request": rid,
                                              "reason": reason, "decode": msg["decode"]}))
            return
        clock = self.loop.clock
        shards = [{"shard": r.shard, "wire_bytes": r.bytes, "start": clock.to_modelled(r.start),
                   "end": clock.to_modelled(r.end)} for r in results]
        self.loop.post(lambda: self.send({"type": "sent", "request": rid, "shards": shards}))

    def shutdown(self) -> None:
        self.background.stop()
