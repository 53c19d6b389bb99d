"""Load generator: replays the scenario's workload (trace or profile, compressed to the
target rate, seeded exactly as the flow simulator builds it) into the router on time."""

from __future__ import annotations

import threading
import time

from testbed.workers.worker import Worker
from testbed.workloads.build import build_workload


class LoadGenerator(Worker):
    role = "loadgen"

    def __init__(self, cfg, instance: str = "loadgen"):
        super().__init__(cfg, instance)
        self.workload = build_workload(self.scenario, cfg.seed)
        self._stop = threading.Event()

    def on_start(self) -> None:
        threading.Thread(target=self._replay, daemon=True, name="replay").start()

    def _replay(self) -> None:
        clock = self.loop.clock
        for req in self.workload.requests:
            if not clock.sleep_until(req.arrival_s, self._stop):
                return
            self.loop.lateness.record(clock.wall(req.arrival_s), time.time())
            self.send({"type": "request", "request": req.request_id,
                       "input_len": req.input_len, "output_len": req.output_len,
                       "hash_ids": list(req.hash_ids), "arrival": req.arrival_s})
        self.send({"type": "loadgen_done", "count": len(self.workload.requests)})

    def shutdown(self) -> None:
        self._stop.set()
