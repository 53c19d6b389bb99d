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
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from testbed.control.plane import ControlPlane, scenario_scheduler
from testbed.lifecycle import RequestState, new_request, request_row
from testbed.model import granularity, mfs, reuse
from testbed.model.cache import BlockIndex
from testbed.model.kv import kv_bytes_per_token, kv_cache_bytes
from testbed.model.oracle import Oracle, TransferIntent
from testbed.model.schedulers import Candidate, switches_roles
from testbed.serving import PrefillInstance
from testbed.topologies.placement import interface_netns, private_daemons
from testbed.topologies.routing import PairPaths, packet_ecmp
from testbed.workers.channel import Connection, Listener
from testbed.workers.clock import CLOCK_PROBES, RealTimeLoop, clock_sample
from testbed.workers.config import RunConfig
from testbed.workers.faults import FaultState, fault_interfaces, set_links
from testbed.workers.journal import Journal
from testbed.workers.kvstream import scaled_bytes
from testbed.workers.roles import RouterFlowKV
from testbed.workloads.build import request_slo
from testbed.workloads.requests import Request

START_MARGIN_S = 0.5  # wall seconds between "start" and modelled time zero


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


@dataclass
class Ledger:
    """Byte and message bookkeeping the run checks at the end."""

    wire_sent: dict[str, int] = field(default_factory=dict)
    wire_received: dict[str, int] = field(default_factory=dict)
    wire_expected: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duplicates: int = 0


def fetch_oracle(url: str, timeout: float = 2.0) -> Oracle:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return Oracle.from_dict(json.loads(resp.read()))


class Router:
    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        sc = self.sc = cfg.load_scenario()
        self.spec = sc.cluster.spec()
        self.model = sc.model_spec()
        self.timing = sc.timing_model()
        self.block_tokens = sc.workload.block_tokens
        self.shards = sc.network.flows_per_transfer or self.spec.tp
        self.scheduler = scenario_scheduler(sc, cfg.scheduler, cfg.seed)
        self.loop = RealTimeLoop(cfg.clock(time.time()))
        # the path a transfer's shards take is recorded where the controller pins it (per
        # pair); under per-flow hashing each shard's path is OVS's choice, unknown here
        self.paths = PairPaths(self.spec) if packet_ecmp(sc.network.ecmp) == "per-pair" \
            else None
        self.prefill = {i.name: PrefillInstance(  # estimates only
            i.name, self.timing, slowdown=sc.cluster.slowdown.get(i.name, 1.0))
            for i in self.spec.prefill_pool}
        self.views = {i.name: DecodeView(BlockIndex(self.block_tokens))
                      for i in self.spec.decode_pool}
        self.expected_workers = set(self.prefill) | set(self.views) | {"loadgen"}
        self.conns: dict[str, Connection] = {}
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
        self.warmup, self.measure = sc.workload.warmup_s, sc.workload.measure_s
        self.latest_oracle: Oracle = fetch_oracle(cfg.oracle_url + "/oracle")
        self.oracle_fetches, self.oracle_errors = 1, 0
        self.intents: queue.SimpleQueue[TransferIntent | None] = queue.SimpleQueue()
        self.intents_posted = 0
        self._stop = threading.Event()
        self.finished = False
        self.outcome = "running"
        self.journal = Journal(Path(cfg.out))
        self.faults = FaultState()
        self.plane = ControlPlane(self.scheduler, self.spec, sc.recovery, self.timing, self)
        self.pids: dict[str, int] = {}
        self.fetching: dict[str, str] = {}  # request -> holder whose fetch is under way
        self.level_bytes: dict[int, float] = {}  # modelled KV bytes per priority level
        self.reuse_bytes = 0.0
        self.stall_s: dict[str, float] = {}  # prefill instance -> GPU time lost to fetches
        self.pruned: set[str] = set()
        self.flowkv = RouterFlowKV(self) if switches_roles(cfg.scheduler) else None

    # -- oracle and intents (their own threads; decisions read self.latest_oracle) -----------
    def _refresh_oracle(self) -> None:
        period = self.loop.clock.spans.wall(self.sc.oracle.refresh_s)
        while not self._stop.wait(period):
            try:
                self.latest_oracle = fetch_oracle(self.cfg.oracle_url + "/oracle")
                self.oracle_fetches += 1
            except (OSError, ValueError):
                self.oracle_errors += 1  # keep deciding on the last oracle: it only ages
            self._write_live()

    def _write_live(self) -> None:
        """live.json: what `testbed emulate` shows beside its progress bar (the oracle this
        router decides on, its transfers in flight); best effort, never in the way."""
        try:
            states = list(self.states.values())
        except RuntimeError:  # the loop thread added a request meanwhile: next period
            return
        doc = {"congestion": {str(k): v for k, v in self.latest_oracle.congestion.items()},
               "in_flight": self.plane.in_flight(), "arrived": len(states),
               "ended": sum(rs.state is not None for rs in states), "expected": self.expected}
        path = Path(self.cfg.out) / "live.json"
        with contextlib.suppress(OSError):
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, path)

    def _post_intents(self) -> None:
        while (intent := self.intents.get()) is not None:
            headers = {"Content-Type": "application/json"}
            if self.sc.emulation.token:
                headers["Authorization"] = f"Bearer {self.sc.emulation.token}"
            req = urllib.request.Request(self.cfg.oracle_url + "/intent",
                                         data=json.dumps(intent.to_dict()).encode(),
                                         headers=headers)
            try:
                urllib.request.urlopen(req, timeout=2.0).close()
                self.intents_posted += 1
            except OSError:
                pass

    # -- connections -----------------------------------------------------------------------
    def _on_connect(self, conn: Connection) -> None:
        conn.read_forever(lambda c, m: self.loop.post(lambda: self._dispatch(c, m)),
                          lambda c, why: self.loop.post(lambda: self._closed(c, why)))

    def _closed(self, conn: Connection, why: str) -> None:
        if conn.name in self.views:
            return  # a decode instance is declared dead by missed heartbeats, then recovered
        if not self.finished and conn.name in self.expected_workers - {"loadgen"}:
            self.ledger.errors.append(f"worker {conn.name} disconnected: {why}")
            self._fail_involving(conn.name, f"worker {conn.name} exited ({why})")
            self.prefill.pop(conn.name, None)  # arrivals from now on go to the others

    def _dispatch(self, conn: Connection, msg: dict) -> None:
        kind = msg["type"]
        if kind == "hello":
            if msg.get("token") != self.cfg.control_token:
                self.ledger.errors.append(f"refused a hello for {msg.get('instance')!r}: "
                                          "wrong control token")
                conn.close()
                return
            conn.name = msg["instance"]
            self.conns[conn.name] = conn
            if msg.get("pid"):
                self.pids[conn.name] = int(msg["pid"])
            if msg.get("machine", self.machine) != self.machine:
                # another machine's clock: measured by round trips before the start
                self.clock_samples[conn.name] = []
                self._probe_clock(conn.name)
            self._start_when_ready()
            return
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            self.ledger.errors.append(f"unexpected '{kind}' from {conn.name}")
            return
        handler(msg)

    def _broadcast(self, msg: dict) -> None:
        for conn in self.conns.values():
            with contextlib.suppress(OSError):
                conn.send(msg)

    def send(self, name: str, msg: dict) -> None:
        try:
            self.conns[name].send(msg)
        except (OSError, KeyError) as exc:
            self.ledger.errors.append(f"cannot reach {name}: {exc}")

    def _probe_clock(self, name: str) -> None:
        self.send(name, {"type": "clock", "sent": time.time()})

    def _on_clock(self, msg: dict) -> None:
        """A worker on another machine answered a probe with its wall clock."""
        name = msg["instance"]
        samples = self.clock_samples.get(name)
        if samples is None or name in self.clock_offsets:
            return
        samples.append(clock_sample(float(msg["sent"]), float(msg["wall"]), time.time()))
        if len(samples) < CLOCK_PROBES:
            self._probe_clock(name)
            return
        self.clock_rtt[name], self.clock_offsets[name] = min(samples)
        self._start_when_ready()

    def _start_when_ready(self) -> None:
        """Every worker connected, and every other machine's clock measured."""
        if (self.t0 is None and set(self.conns) >= self.expected_workers
                and set(self.clock_offsets) >= set(self.clock_samples)):
            self._start()

    def _start(self) -> None:
        t0 = time.time() + self.loop.clock.spans.wall(START_MARGIN_S)
        self.loop.clock = self.cfg.clock(t0)
        self.t0 = t0
        threading.Thread(target=self._refresh_oracle, daemon=True, name="oracle").start()
        threading.Thread(target=self._post_intents, daemon=True, name="intents").start()
        for name, conn in self.conns.items():  # t0 on each worker's own clock
            with contextlib.suppress(OSError):
                conn.send({"type": "start", "t0": t0 + self.clock_offsets.get(name, 0.0)})
        self.loop.at(self.sc.recovery.heartbeat_s, self._check_heartbeats)
        for fault in self.sc.faults:
            self.loop.at(fault.at_s, lambda fault=fault: self._inject(fault))
        if self.flowkv is not None:
            self.flowkv.start()

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
        inst, plan = self.plane.place_prefill(rs, self.prefill, self.flowkv, self.sc.reuse)
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

    def _oracle_age(self) -> float:
        age = self.loop.clock.span(time.time() - self.latest_oracle.generated_at)
        self.faults.note_oracle_age(age)
        return age

    def oracle_fresh(self) -> bool:
        return self._oracle_age() <= self.sc.recovery.oracle_max_age_s

    def oracle(self) -> Oracle:
        """The last oracle as the control plane lets a decision use it; under FlowKV roles
        switch, so it also knows every instance pair's tier."""
        oracle = self.plane.view(self.latest_oracle, self._oracle_age())
        if self.flowkv is not None:
            oracle = oracle.with_tiers(self.flowkv.all_tiers)
        return oracle

    def slo(self, request_id: str) -> float:
        return request_slo(self.sc.slo_s(), self.sc.workload.slo_mix, request_id)

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
                                "calls": self._calls(rs)})
        self.intents.put(TransferIntent(req.request_id, rs.prefill, rs.decode,
                                        int(rs.eff_bytes)))

    def _calls(self, rs: RequestState) -> int:
        """Send calls per shard under network.transfer_mode (granularity.py)."""
        net = self.sc.network
        tokens = round(rs.eff_bytes / kv_bytes_per_token(self.model))
        return granularity.transfer_calls(net.transfer_mode, tokens, self.block_tokens,
                                          self.model.n_layers, net.segment_blocks)

    def _p2d_deadline(self, rs: RequestState) -> float:
        return mfs.p2d_deadline(rs.req.arrival_s, self.slo(rs.req.request_id),
                                self.timing.iteration_time(self.sc.cluster.beta_max))

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
                "start": float(s["start"]), "end": float(s["end"]), **(s.get("tcp") or {})})
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
        rc = self.sc.recovery
        wait = (rc.missed_heartbeats + 1) * rc.heartbeat_s
        self.loop.after(wait, lambda: self._transfer_failed(rs, decode, str(msg["reason"])))

    def _transfer_failed(self, rs: RequestState, decode: str, reason: str) -> None:
        if rs.state is None and rs.decode == decode and decode not in self.plane.dead:
            self._fail(rs, reason)

    def _on_state(self, msg: dict) -> None:
        view = self.views.get(msg["instance"])
        if view is not None:
            view.apply(msg)

    def _on_heartbeat(self, msg: dict) -> None:
        self.faults.last_beat[msg["instance"]] = self.loop.now
        if msg.get("error"):
            self.ledger.errors.append(f"{msg['instance']}: {msg['error']}")

    def _on_loadgen_done(self, msg: dict) -> None:
        self.expected = int(msg["count"])
        self.loop.at(self.last_arrival + self.sc.drain_s, self._drain_limit)
        self._check_done()

    # -- endings -------------------------------------------------------------------------------
    # -- faults and recovery -----------------------------------------------------------------
    def add_view(self, name: str) -> None:
        """Start tracking a decode engine's reports (a prefill worker switched to decode
        work by FlowKV)."""
        self.views[name] = DecodeView(BlockIndex(self.block_tokens))

    def _check_heartbeats(self) -> None:
        rc = self.sc.recovery
        limit = rc.missed_heartbeats * rc.heartbeat_s
        for name in list(self.views):
            if name not in self.plane.dead and \
                    self.loop.now - self.faults.last_beat.get(name, 0.0) > limit:
                self._declare_dead(name)
        if not self.finished:
            self.loop.after(rc.heartbeat_s, self._check_heartbeats)

    def _declare_dead(self, name: str) -> None:
        for rid, holder in list(self.fetching.items()):
            if holder == name:  # the prefill computes that prefix itself
                del self.fetching[rid]
                rs = self.states[rid]
                if rs.prefill is not None:
                    self.send(rs.prefill, {"type": "fetch_failed", "request": rid,
                                            "reason": f"holder {name} declared dead"})
        self.faults.log.append({"time": self.loop.now, "event": "declared dead", "target": name})
        self.plane.declare_dead(name, list(self.states.values()))
        self._check_done()

    def _inject(self, fault) -> None:
        """Make a scenario fault happen on the real system, at its modelled time."""
        self.faults.log.append({"time": self.loop.now, "event": fault.kind,
                                "target": fault.target})
        back = self.loop.clock.spans.wall(fault.duration_s) if fault.duration_s else None
        try:
            if fault.kind == "decode_down":
                os.kill(self.pids[fault.target], signal.SIGKILL)
            elif fault.kind == "controller_down" and self.cfg.controller_pid:
                os.kill(self.cfg.controller_pid, signal.SIGSTOP)
                if back:
                    threading.Timer(back, os.kill, (self.cfg.controller_pid,
                                                    signal.SIGCONT)).start()
            elif fault.kind in ("link_down", "tor_down"):
                fabric = self.sc.fabric()
                intfs = fault_interfaces(fabric, fault)
                where = interface_netns(fabric, private_daemons(self.sc.emulation))
                set_links(intfs, up=False, netns=where)
                if back:
                    threading.Timer(back, set_links, (intfs, True, where)).start()
            elif fault.kind == "background":
                self._broadcast({"type": "surge", "tier": fault.tier,
                                 "fraction": fault.fraction,
                                 "until": self.loop.now + (fault.duration_s or 1e9)})
        except (OSError, KeyError) as exc:
            self.ledger.errors.append(f"fault {fault.kind} {fault.target}: {exc}")

    def _fail(self, rs: RequestState, reason: str) -> None:
        if rs.decode is not None and rs.transfer_end is None:
            self.send(rs.decode, {"type": "cancel", "request": rs.req.request_id,
                                   "reason": reason})
        self.plane.end(rs, "failed", reason)

    def _fail_involving(self, name: str, reason: str) -> None:
        for rs in self.states.values():
            if rs.state is None and name in (rs.prefill, rs.decode):
                self._fail(rs, reason)
        self._check_done()

    def _drain_limit(self) -> None:
        for rs in self.states.values():
            if rs.state is None:
                self._fail(rs, f"not finished {self.sc.drain_s:g} s after the last arrival "
                               "(drain limit)")
        self._check_done()

    def _check_done(self) -> None:
        if self.finished or self.expected is None:
            return
        if len(self.states) >= self.expected and all(rs.state for rs in self.states.values()):
            self.finished = True
            self.outcome = "finished"
            self._broadcast({"type": "stop"})
            self.loop.stop()

    def result(self) -> dict:
        mismatched = {rid: (self.ledger.wire_sent.get(rid), self.ledger.wire_received.get(rid))
                      for rid in self.ledger.wire_received
                      if self.ledger.wire_sent.get(rid) != self.ledger.wire_received[rid]}
        return {
            "outcome": self.outcome, "scheduler": self.cfg.scheduler, "seed": self.cfg.seed,
            "t0": self.t0, "expected": self.expected,
            "requests": [request_row(rs, self.slo(rs.req.request_id))
                         for rs in self.states.values()],
            "transfers": sorted(self.transfers, key=lambda t: (t["start"], t["request"],
                                                               t["shard"])),
            "decision_us": self.plane.decision_us,
            "wire_bytes_sent": sum(self.ledger.wire_sent.values()),
            "wire_bytes_received": sum(self.ledger.wire_received.values()),
            "wire_bytes_expected": sum(self.ledger.wire_expected.values()),
            "wire_mismatches": mismatched,
            "oracle_fetches": self.oracle_fetches, "oracle_errors": self.oracle_errors,
            "intents_posted": self.intents_posted,
            "duplicates": self.ledger.duplicates, "errors": self.ledger.errors,
            "oracle_age_max_s": self.faults.max_age, "faults": self.faults.log,
            "clock_offsets_s": self.clock_offsets, "clock_rtt_s": self.clock_rtt,
            "counters": self.plane.counters(
                faults_injected=sum(f["event"] != "declared dead" for f in self.faults.log),
                level_bytes=self.level_bytes, reuse_bytes=self.reuse_bytes,
                prefill_stall_s=sum(self.stall_s.values()), pruned_requests=len(self.pruned),
                roles=self.flowkv),
        }

    # -- main ------------------------------------------------------------------------------------
    def run(self) -> dict:
        listener = Listener(self.cfg.router_socket, self._on_connect).start()
        deadline_timer = threading.Timer(self.sc.emulation.start_timeout_s,
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

    def _hello_timeout(self) -> None:
        missing = self.expected_workers - set(self.conns)
        if missing and not hasattr(self, "t0"):
            self.outcome = f"workers never connected: {', '.join(sorted(missing))}"
            self.loop.stop()


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
    out = Path(cfg.out) / "router.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out)
    return 0 if result["outcome"] == "finished" else 1
