"""KV through Mooncake's Transfer Engine (emulation.kv_transport: mooncake), as SGLang's
and vLLM's Mooncake connectors move it: an engine per worker in its host's namespace,
TCP transport, P2P handshake (no metadata server); decode workers register a KV buffer
and prefill workers write each TP shard into it.

When a transfer has landed: the engine's TCP protocol (v2) completes a write only once
the target has applied its last byte and acknowledged it. The sender submits every
shard's write at once and awaits each without spinning (Completions); the shard's record
ends there, at the acknowledgement, as the pusher's does. Then a one-byte write carries
the engine's notify naming the transfer's shards to the target's handshake port, and the
decode worker, polling get_notifies(), lands them: the pusher's receiver lands a shard at
its last byte, so the decode instance hears of an engine's transfer about two round
trips later (the acknowledgement, the one-byte write, the notify on a new connection).

The engine's sockets carry no DSCP and pick their ports at random in
MC_MIN_RPC_PORT..MC_MAX_RPC_PORT: the range is a fixed block (traffic_classes.engine_ports),
which the hosts' NICs and the ToRs classify as KV by port.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
import time
from collections.abc import Callable

from testbed.clock import Dilation
from testbed.scenario.base import ScenarioError
from testbed.topologies.traffic_classes import engine_ports
from testbed.workers.kvstream import ShardResult, per_shard

WHEEL = "mooncake-transfer-engine-non-cuda"
BUFFER_BYTES = 64 << 20  # each engine's registered buffer; a larger shard goes in pieces
POLL_S = 0.0005  # wall seconds between looks at writes' statuses, and a decode worker's
# at its notifies while it expects shards
WRITE_TIMEOUT_S = 600.0  # wall seconds a write may take before the transfer fails
IDLE_POLL_S = 0.02  # a decode worker's looks while it expects none (a dozen decode
# workers polling at POLL_S were a third of a core of wake-ups on 2 cores)


class EngineError(OSError):
    """The engine would not start, register, or move a shard: names what and where."""


# the engine's own deadlines (Mooncake's defaults, seconds): a connection without payload
# progress, a write's acknowledgement after its last byte, a whole transfer
ENGINE_TIMEOUTS_S = {"MC_TCP_PROGRESS_TIMEOUT_SEC": 30, "MC_TCP_STATUS_TIMEOUT_SEC": 30,
                     "MC_TRANSFER_TIMEOUT": 30}


def engine_env(kv_port: int, persistent: bool, dilation: float = 1.0) -> dict[str, str]:
    """The engine's settings: TCP even where RDMA devices exist, its block of ports, a
    connection pool per peer when the scenario keeps its KV connections (else a
    connection per write, as the engine does by default), errors only in the logs, and
    its deadlines in modelled time: at dilation d a deployment's 30 s are 30*d wall
    seconds (unstretched, a stall of 15 modelled seconds at d=2 dropped connections a
    deployment would keep)."""
    ports = engine_ports(kv_port)
    low, high = ports[0], ports[-1]
    wall = Dilation(dilation).wall
    return {"MC_FORCE_TCP": "1", "MC_MIN_RPC_PORT": str(low), "MC_MAX_RPC_PORT": str(high),
            "MC_TCP_ENABLE_CONNECTION_POOL": "1" if persistent else "0",
            "MC_LOG_LEVEL": "ERROR",
            **{k: str(math.ceil(wall(v))) for k, v in ENGINE_TIMEOUTS_S.items()}}


def installed() -> bool:
    return importlib.util.find_spec("mooncake") is not None and \
        importlib.util.find_spec("mooncake.engine") is not None


def engine_available(scenario, cluster=None) -> None:
    """Refuse, before anything starts, a mooncake run this machine cannot carry."""
    if scenario.emulation.kv_transport != "mooncake":
        return
    if cluster is not None:
        raise ScenarioError(
            "emulation.kv_transport mooncake with --cluster: the engine's traffic is "
            "classified on this machine's host NICs only (run it on one machine, or with "
            "--dask, where every server runs its own fabric)")
    if not installed():
        raise ScenarioError(
            f"emulation.kv_transport mooncake: Mooncake's Transfer Engine ({WHEEL}) is not "
            "installed in this environment (./run.sh setup installs it; its wheels are "
            "x86-64 only)")


class KVEngine:
    """One worker's Transfer Engine and its registered buffer."""

    def __init__(self, host: str, kv_port: int, persistent: bool,
                 capacity: int = BUFFER_BYTES, dilation: float = 1.0):
        # read when the engine starts
        os.environ.update(engine_env(kv_port, persistent, dilation))
        try:
            from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode
        except ImportError as exc:
            raise EngineError(f"Mooncake's Transfer Engine cannot be imported ({exc}); "
                              f"install {WHEEL}") from None
        self._notify, self._write = TransferNotify, TransferOpcode.Write
        self.te = TransferEngine()
        rc = self.te.initialize(host, "P2PHANDSHAKE", "tcp", "")
        if rc != 0:
            ports = engine_ports(kv_port)
            raise EngineError(f"the Transfer Engine did not start on {host} (rc {rc}; two "
                              f"of ports {ports[0]}-{ports[-1]} must be free there)")
        self.session = f"{host}:{self.te.get_rpc_port()}"
        self.capacity = capacity
        self.buffer = self.te.allocate_managed_buffer(capacity)
        if not self.buffer:
            raise EngineError(f"{self.session}: registering a {capacity}-byte KV buffer "
                              "was refused")
        self.completions = Completions(self.te)

    def endpoint(self) -> dict:
        """What a sender needs to write here: the session and the registered buffer."""
        return {"session": self.session, "addr": self.buffer, "capacity": self.capacity}

    def send_transfer(self, endpoint: dict, request: str, shard_sizes: list[int],
                      stage: str = "p2d") -> list[ShardResult]:
        """Every shard one write (a larger one in pieces, each landed before the next),
        all in parallel as the pusher sends its shards, then one notify to the target
        naming them; results in shard order."""
        results = per_shard(len(shard_sizes),
                            lambda k: self._shard(endpoint, request, k, shard_sizes, stage))
        self._tell(endpoint, request, results, stage)
        return results

    def _shard(self, endpoint: dict, request: str, k: int, sizes: list[int], stage: str
               ) -> ShardResult:
        size, piece = sizes[k], min(self.capacity, int(endpoint["capacity"]))
        start = time.time()
        for at in range(0, max(size, 1), piece):
            batch = self.te.transfer_submit_write(endpoint["session"], self.buffer,
                                                  int(endpoint["addr"]),
                                                  max(1, min(piece, size - at)))
            status = self.completions.wait(batch) if batch else -1
            if status != 1:
                raise EngineError(f"{request}/{k}: the engine's write to "
                                  f"{endpoint['session']} failed (status {status}; the "
                                  "worker's log has the engine's reason)")
        return ShardResult(request, k, len(sizes), size, start, time.time(), stage=stage)

    def _tell(self, endpoint: dict, request: str, results: list[ShardResult],
              stage: str) -> None:
        """The notify that lands the transfer at its target: a one-byte write carrying it
        (only the engine's synchronous write sends one; its spin lasts that write's round
        trip, at the idle policy)."""
        note = json.dumps({"request": request, "stage": stage,
                           "start": min(r.start for r in results),
                           "shards": [[r.shard, r.bytes] for r in results]})
        me = threading.get_native_id()
        os.sched_setscheduler(me, os.SCHED_IDLE, os.sched_param(0))
        try:
            rc = self.te.transfer_sync(endpoint["session"], self.buffer, int(endpoint["addr"]),
                                       1, self._write, self._notify("kv", note))
        finally:
            os.sched_setscheduler(me, os.SCHED_OTHER, os.sched_param(0))
        if rc != 0:
            raise EngineError(f"{request}: the notify to {endpoint['session']} failed "
                              f"(rc {rc}; the worker's log has the engine's reason)")


class Completions:
    """Awaits the engine's asynchronous writes without spinning: its synchronous write
    spins the caller on the status (measured: a core per writer, which starved the
    datapath at any dilation), so one thread polls every outstanding write's status each
    POLL_S and wakes its waiter. A status read once complete is consumed, so only this
    thread reads them."""

    def __init__(self, te, timeout_s: float = WRITE_TIMEOUT_S):
        self.te, self.timeout_s = te, timeout_s
        self._waiting: dict[int, list] = {}  # batch -> [Event, status]
        self._lock = threading.Lock()
        self._wake = threading.Event()
        threading.Thread(target=self._poll, name="kv-status", daemon=True).start()

    def wait(self, batch: int) -> int:
        """The write's status: 1 done, -1 failed, -2 timed out."""
        box = [threading.Event(), 0]
        with self._lock:
            self._waiting[batch] = box
        self._wake.set()
        if not box[0].wait(self.timeout_s):
            with self._lock:
                self._waiting.pop(batch, None)
            return -2
        return box[1]

    def _poll(self) -> None:
        while True:
            with self._lock:
                waiting = list(self._waiting.items())
            if not waiting:
                self._wake.wait()
                self._wake.clear()
                continue
            time.sleep(POLL_S)
            for batch, box in waiting:
                status = self.te.transfer_check_status(batch)
                if status != 0:
                    with self._lock:
                        self._waiting.pop(batch, None)
                    box[1] = status
                    box[0].set()


class EngineReceiver:
    """Calls on_shard(ShardResult) when a shard's write has landed: the sender's notify.
    The engine offers no blocking wait for notifies, so it polls: often while shards it
    was told to expect (expect()) are outstanding, seldom otherwise."""

    def __init__(self, engine: KVEngine, on_shard: Callable[[ShardResult], None],
                 on_error: Callable[[str, str | None], None]):
        self.engine, self.on_shard, self.on_error = engine, on_shard, on_error
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._expected: dict[str, int] = {}  # request -> shards not yet heard of
        self._thread = threading.Thread(target=self._poll, name="kv-notify", daemon=True)

    def start(self) -> EngineReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._wake.set()

    def expect(self, request: str, shards: int) -> None:
        """A transfer of `shards` shards is on its way (the router's assign)."""
        if shards > 0:
            self._expected[request] = shards
            self._wake.set()

    def forget(self, request: str) -> None:
        self._expected.pop(request, None)

    def _heard(self, request: str) -> None:
        left = self._expected.get(request)
        if left is not None:
            if left <= 1:
                self._expected.pop(request, None)
            else:
                self._expected[request] = left - 1

    def _poll(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(POLL_S if self._expected else IDLE_POLL_S)
            self._wake.clear()
            for note in self.engine.te.get_notifies():
                now = time.time()
                try:
                    head = json.loads(note.msg)
                    shards = [(int(k), int(n)) for k, n in head["shards"]]
                    results = [ShardResult(str(head["request"]), k, len(shards), n,
                                           float(head["start"]), now,
                                           stage=str(head["stage"])) for k, n in shards]
                except (ValueError, KeyError, TypeError) as exc:
                    self.on_error(f"unreadable notify from {note.name}: {exc}", None)
                    continue
                for result in results:
                    self._heard(result.request)
                    self.on_shard(result)
