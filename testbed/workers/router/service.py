"""Router: the scheduler service of an emulated run.

It runs the flow simulator's scheduler code (testbed/model/schedulers.py) on what a real
router knows: the oracle fetched from the controller over HTTP every Delta_oracle, and
decode instance state from the workers' own reports (free memory, queue, batch, and a
mirror of each cache's blocks for prefix hits). Between a decision and the decode's
next report it counts the decision's reservation itself (optimistic accounting keyed by
a per-instance sequence number), as production routers do.

Prefill placement is the flow simulator's: the instance whose FIFO clears first, by the
router's own estimate. The router keeps every request's RequestState and, when the load
generator has finished and every request has ended (or the drain limit passed), writes
the run's requests, transfers and counters to OUT/router.json and tells workers to stop.

This module keeps requests' path through the run and the engine interface the control
plane calls; the control protocol and start (router_link.py), the oracle and live view
(router_oracle.py), faults (router_faults.py) and the end of run and its result
(router_records.py) sit beside it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from testbed.control.plane import ControlPlane, scenario_scheduler
from testbed.lifecycle import RequestState, new_request, request_row
from testbed.model import granularity, mfs, reuse
from testbed.model.cache import BlockIndex
from testbed.model.candidates import Candidate
from testbed.model.kv import kv_bytes_per_token, kv_cache_bytes
from testbed.model.oracle import Oracle, TransferIntent
from testbed.model.schedulers import switches_roles
from testbed.serving import PrefillInstance
from testbed.topologies.replica import scaled_bytes
from testbed.topologies.routing import PairPaths, packet_ecmp
from testbed.workers.channel import Connection, Listener
from testbed.workers.config import RunConfig
from testbed.workers.journal import Journal
from testbed.workers.realtime import RealTimeLoop
from testbed.workers.router.control_link import ControlLink
from testbed.workers.router.failures import RouterFaults
from testbed.workers.router.fault_state import FaultState
from testbed.workers.router.network_view import OracleFeed, first_oracle
from testbed.workers.router.role_switching import RouterFlowKV
from testbed.workers.router.run_result import Ledger, RunRecords
from testbed.workloads.build import request_slo
from testbed.workloads.requests import Request


class RouterError(RuntimeError):
    pass


@dataclass
class DecodeView:
    """A decode instance as the router knows it: last report + its own decisions since."""

    index: BlockIndex
    free_memory: float = 0.0
    queued: int = 0
    batch: int = 0
    seen: int = 0  # last decision sequence number the report reflected
    seq: int = 0  # last decision sequence number sent
    pending: dict[int, float] = field(default_factory=dict)  # seq -> bytes reserved

    def apply(self, msg: dict) -> None:
        self.free_memory = float(msg["free_memory"])
        self.queued = int(msg["queued"])
        self.batch = int(msg["batch"])
        self.seen = max(self.seen, int(msg.get("seq", 0)))
        self.index.update(msg.get("added", ()), msg.get("removed", ()))
        for s in [s for s in self.pending if s <= self.seen]:
            del self.pending[s]

    def candidate(self, name: str, req: Request) -> Candidate:
        return Candidate(name, self.free_memory - sum(self.pending.values()),
                         self.queued + len(self.pending), self.batch,
                         self.index.prefix_hit_tokens(req.hash_ids, req.input_len))


class Router(ControlLink, OracleFeed, RouterFaults, RunRecords):
    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        scenario = self.scenario = cfg.load_scenario()
        self.spec = scenario.cluster.spec()
        self.model = scenario.model_spec()
        self.timing = scenario.timing_model()
        self.block_tokens = scenario.workload.block_tokens
        self.shards = scenario.network.flows_per_transfer or self.spec.tp
        self.scheduler = scenario_scheduler(scenario, cfg.scheduler, cfg.seed)
        self.loop = RealTimeLoop(cfg.clock(time.time()))
        # the path a transfer's shards take is recorded where the controller pins it (per
        # pair); under per-flow hashing each shard's path is OVS's choice, unknown here
        self.paths = PairPaths(self.spec) if packet_ecmp(scenario.network.ecmp) == "per-pair" \
            else None
        self.prefill = {i.name: PrefillInstance(  # estimates only
            i.name, self.timing, slowdown=scenario.cluster.slowdown.get(i.name, 1.0))
            for i in self.spec.prefill_pool}
        self.views = {i.name: DecodeView(BlockIndex(self.block_tokens))
                      for i in self.spec.decode_pool}
        self.expected_workers = set(self.prefill) | set(self.views) | {"loadgen"}
        self.conns: dict[str, Connection] = {}
        self.kv_endpoints: dict[str, dict] = {}  # decode -> where its Transfer Engine takes KV
        self.machine = socket.gethostname()
        self.clock_offsets: dict[str, float] = {}  # worker -> its clock minus ours (s)
        self.clock_rtt: dict[str, float] = {}  # the round trip its offset came from (s)
        self.clock_samples: dict[str, list[tuple[float, float]]] = {}  # other machines'
        self.t0: float | None = None
        self.states: dict[str, RequestState] = {}
        self.transfers: list[dict] = []
        self.ledger = Ledger()
        self.expected: int | None = None
        self.last_arrival = 0.0
        self.warmup, self.measure = scenario.workload.warmup_s, scenario.workload.measure_s
        self.latest_oracle: Oracle = first_oracle(cfg.oracle_url + "/oracle")
        self.oracle_fetches, self.oracle_errors = 1, 0
        self.intents: queue.SimpleQueue[TransferIntent | None] = queue.SimpleQueue()
        self.intents_posted = 0
        self._stop = threading.Event()
        self.finished = False
        self.outcome = "running"
        self.journal = Journal(Path(cfg.out))
        self.faults = FaultState()
        self.plane = ControlPlane(self.scheduler, self.spec, scenario.recovery, self.timing, self)
        self.pids: dict[str, int] = {}
        self.fetching: dict[str, str] = {}  # request -> holder whose fetch is under way
        self.level_bytes: dict[int, float] = {}  # modelled KV bytes per priority level
        self.reuse_bytes = 0.0
        self.stall_s: dict[str, float] = {}  # prefill instance -> GPU time lost to fetches
        self.pruned: set[str] = set()
        self.flowkv = RouterFlowKV(self) if switches_roles(cfg.scheduler) else None

    # -- request path --------------------------------------------------------------------------
    def _on_request(self, msg: dict) -> None:
        req = Request(msg["request"], float(msg["arrival"]), int(msg["input_len"]),
                      int(msg["output_len"]), tuple(msg["hash_ids"]))
        if req.request_id in self.states:
            self.ledger.duplicates += 1
            return
        rs = new_request(req, self.warmup, self.measure, kv_bytes_per_token(self.model))
        self.states[req.request_id] = rs
        self.last_arrival = max(self.last_arrival, req.arrival_s)
        if not self.prefill and self.flowkv is None:
            self._fail(rs, "no prefill instance left (every prefill worker exited)")
            return
        # inst: the router's estimate of the instance; the worker reports the truth
        inst, plan = self.plane.place_prefill(rs, self.prefill, self.flowkv, self.scenario.reuse)
        if self.flowkv is not None:
            self.flowkv.dispatched(inst.name, req.request_id, req.input_len)
        self.send(inst.name, {"type": "prefill", "request": req.request_id,
                               "input_len": req.input_len, "output_len": req.output_len,
                               "hash_ids": list(req.hash_ids), "arrival": req.arrival_s,
                               "reuse_tokens": rs.reuse_tokens})
        if plan is not None:
            self._fetch(rs, plan.holder)

    def prefix_hits(self, req: Request) -> dict[str, int]:
        return {name: view.index.prefix_hit_tokens(req.hash_ids, req.input_len)
                for name, view in self.views.items() if name not in self.plane.dead}

    def _fetch(self, rs: RequestState, holder: str) -> None:
        """Stage 1: the holder streams the cached prefix's KV to the prefill instance."""
        req = rs.req
        self.fetching[req.request_id] = holder
        size = kv_bytes_per_token(self.model) * rs.reuse_tokens
        compute = self.timing.prefill_time(req.input_len - rs.reuse_tokens)
        tier = self.spec.tier(rs.prefill, holder)
        self.send(holder, {"type": "fetch", "request": req.request_id,
                            "host": self.cfg.hosts[rs.prefill], "port": self.cfg.kv_port,
                            "wire": [scaled_bytes(size, self.cfg.scale)],
                            "expected_start": rs.prefill_start,
                            "layer_s": reuse.layer_time(compute, self.model.n_layers),
                            "bandwidth": self.oracle().bandwidth(tier)})

    def _on_prefill_done(self, msg: dict) -> None:
        rs = self.states.get(msg["request"])
        if rs is None or rs.state is not None:
            return
        rs.prefill, rs.prefill_start, rs.prefill_end = msg["instance"], msg["start"], msg["end"]
        self.stall_s[rs.prefill] = float(msg.get("stall_s") or 0.0)
        if self.fetching.pop(rs.req.request_id, None) is not None and msg.get("fetch_wire_bytes"):
            self.reuse_bytes += kv_bytes_per_token(self.model) * rs.reuse_tokens
        if self.flowkv is not None:
            self.flowkv.prefilled(rs.prefill, rs.req.request_id)
        self.plane.prefilled(rs)

    # -- the control plane's engine (testbed/control/plane.py) ----------------------------------
    def now(self) -> float:
        return self.loop.now

    def candidates(self, req: Request) -> list[Candidate]:
        closed = self.flowkv.closed_decoders() if self.flowkv is not None else set()
        return [v.candidate(name, req) for name, v in self.views.items()
                if name not in self.plane.dead and name not in closed]

    def slo(self, request_id: str) -> float:
        return request_slo(self.scenario.slo_s(), self.scenario.workload.slo_mix, request_id)

    def assign_transfer(self, rs: RequestState) -> None:
        self._send_work(rs)

    def assign_local(self, rs: RequestState) -> None:
        self.ledger.wire_sent[rs.req.request_id] = 0
        self._send_work(rs, local=True)

    def assign_recompute(self, rs: RequestState, seconds: float, ready_at: float) -> None:
        self._send_work(rs, recompute_s=seconds)  # the worker queues it behind its others

    def ended(self, rs: RequestState) -> None:
        self.journal.request(request_row(rs, self.slo(rs.req.request_id)))
        self._check_done()

    def _send_work(self, rs: RequestState, recompute_s: float = 0.0, local: bool = False
                   ) -> None:
        """Tell the decode instance to expect the request (reserve memory) and the prefill
        instance to send its KV; a recompute needs no transfer."""
        req = rs.req
        output_bytes = kv_cache_bytes(self.model, req.output_len)
        view = self.views[rs.decode]
        view.seq += 1
        view.pending[view.seq] = (rs.eff_bytes + output_bytes
                                  + rs.hit_tokens * kv_bytes_per_token(self.model))
        shards = 0 if recompute_s or local else self.shards
        wire = [scaled_bytes(rs.eff_bytes / self.shards, self.cfg.scale) for _ in range(shards)]
        self.ledger.wire_expected[req.request_id] = sum(wire)
        self.send(rs.decode, {"type": "assign", "request": req.request_id, "seq": view.seq,
                               "input_len": req.input_len, "output_len": req.output_len,
                               "hash_ids": list(req.hash_ids), "hit_tokens": rs.hit_tokens,
                               "bytes": rs.eff_bytes, "output_bytes": output_bytes,
                               "shards": shards, "recompute_s": recompute_s})
        if recompute_s or local:
            return
        self.send(rs.prefill, {"type": "decision", "request": req.request_id,
                                "decode": rs.decode, "tier": rs.tier, "bytes": rs.eff_bytes,
                                "host": self.cfg.hosts[rs.decode], "port": self.cfg.kv_port,
                                "wire": wire, "deadline": self._p2d_deadline(rs),
                                "bandwidth": self.oracle().bandwidth(rs.tier),
                                "calls": self._calls(rs),
                                "endpoint": self.kv_endpoints.get(rs.decode)})
        self.intents.put(TransferIntent(req.request_id, rs.prefill, rs.decode,
                                        int(rs.eff_bytes)))

    def _calls(self, rs: RequestState) -> int:
        """Send calls per shard under network.transfer_mode (granularity.py)."""
        net = self.scenario.network
        tokens = round(rs.eff_bytes / kv_bytes_per_token(self.model))
        return granularity.transfer_calls(net.transfer_mode, tokens, self.block_tokens,
                                          self.model.n_layers, net.segment_blocks)

    def _p2d_deadline(self, rs: RequestState) -> float:
        return mfs.p2d_deadline(rs.req.arrival_s, self.slo(rs.req.request_id),
                                self.timing.iteration_time(self.scenario.cluster.beta_max))

    def _count_levels(self, shards: list[dict]) -> None:
        for s in shards:
            for level, wire in (s.get("level_bytes") or {}).items():
                self.level_bytes[int(level)] = (self.level_bytes.get(int(level), 0.0)
                                                + int(wire) / self.cfg.scale)

    def _on_sent(self, msg: dict) -> None:
        self._count_levels(msg["shards"])
        if msg.get("stage") == "reuse":
            return
        rs = self.states.get(msg["request"])
        if rs is None:
            return
        if msg.get("pruned"):
            self.pruned.add(rs.req.request_id)
        shard_bytes = rs.eff_bytes / self.shards
        total = 0
        path = self.paths.text(rs.prefill, rs.decode) if self.paths else ""
        for s in msg["shards"]:
            total += int(s["wire_bytes"])
            self.transfers.append({
                "request": rs.req.request_id, "shard": int(s["shard"]), "src": rs.prefill,
                "dst": rs.decode, "tier": rs.tier, "path": path, "bytes": shard_bytes,
                "start": float(s["start"]), "end": float(s["end"]), **(s.get("tcp") or {}),
                "cpu_wait_s": s.get("cpu_wait_s")})
            self.journal.transfer(self.transfers[-1])
        self.ledger.wire_sent[rs.req.request_id] = total

    def _on_kv_done(self, msg: dict) -> None:
        rs = self.states.get(msg["request"])
        if rs is None or rs.transfer_end is not None or msg["decode"] != rs.decode:
            return  # a late report from an instance the request has left
        self.ledger.wire_received[rs.req.request_id] = int(msg["bytes"])
        self.plane.landed(rs, float(msg["end"]))

    def _on_first_token(self, msg: dict) -> None:
        rs = self.states.get(msg["request"])
        if rs is not None and rs.first_token is None:  # a recovered request keeps its first
            rs.first_token = float(msg["time"])

    def _on_complete(self, msg: dict) -> None:
        rs = self.states.get(msg["request"])
        if rs is None:
            return
        if rs.state is not None:
            self.ledger.duplicates += 1
            return
        if msg.get("instance", rs.decode) != rs.decode:
            return
        rs.done = float(msg["time"])
        rs.entry_iter_s = msg.get("entry_iter_s")
        self.plane.served(rs)

    def _on_failed(self, msg: dict) -> None:
        rs = self.states.get(msg["request"])
        if rs is None or rs.state is not None:
            return
        if msg.get("decode", rs.decode) != rs.decode or rs.decode in self.plane.dead:
            return  # recovery has taken the request elsewhere
        # A transfer that broke may mean its receiver died: give the failure detector its
        # full window to say so (then recovery takes the request) before failing it.
        decode = rs.decode
        rc = self.scenario.recovery
        wait = (rc.missed_heartbeats + 1) * rc.heartbeat_s
        self.loop.after(wait, lambda: self._transfer_failed(rs, decode, str(msg["reason"])))

    # -- main ------------------------------------------------------------------------------------
    def add_view(self, name: str) -> None:
        """Start tracking a decode engine's reports (a prefill worker switched to decode
        work by FlowKV)."""
        self.views[name] = DecodeView(BlockIndex(self.block_tokens))

    def run(self) -> dict:
        listener = Listener(self.cfg.router_socket, self._on_connect).start()
        deadline_timer = threading.Timer(self.scenario.emulation.start_timeout_s,
                                         lambda: self.loop.post(self._hello_timeout))
        deadline_timer.daemon = True
        deadline_timer.start()
        try:
            self.loop.run()
        finally:
            deadline_timer.cancel()
            self._stop.set()
            self.intents.put(None)
            listener.close()
            self.journal.close()
        return self.result()


def main(config: str) -> int:
    cfg = RunConfig.load(Path(config))
    try:
        router = Router(cfg)
    except OSError as exc:
        print(f"router: cannot fetch the oracle at {cfg.oracle_url}: {exc}", file=sys.stderr)
        return 2
    def stopped(signum, _frame) -> None:
        """Stopped from outside (the run interrupted, or over time): end the loop so what
        finished so far is written below, not lost with the process."""
        def end() -> None:
            if not router.finished:
                router.outcome = f"stopped by {signal.Signals(signum).name}"
            router.loop.stop()
        router.loop.post(end)

    signal.signal(signal.SIGTERM, stopped)
    try:
        result = router.run()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        result = {**router.result(), "outcome": "router crashed: " + traceback.format_exc(limit=2)}
    router.loop.lateness.write(cfg.out, "router", cfg.dilation)
    out = Path(cfg.out) / "router.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)
    return 0 if result["outcome"] == "finished" else 1
