"""KV through Mooncake's Transfer Engine (emulation.kv_transport: mooncake), as SGLang's
and vLLM's Mooncake connectors move it: an engine per worker in its host's namespace,
TCP transport, P2P handshake (no metadata server); decode workers register a KV buffer
and prefill workers write each TP shard into it.

When a shard has landed: the engine's TCP protocol (v2) completes a write only once the
target has applied its last byte and acknowledged it; the sender then sends the write's
notify message to the target's handshake port, and the decode worker, polling
get_notifies(), learns the shard landed there: the pusher's receiver learns it at its
last byte. So the decode instance hears of an engine's shard about 1.5 round trips later
than of a pusher's (one of them on a new connection), and the sender's record ends at
the acknowledgement, as the pusher's does.

The engine's sockets carry no DSCP and pick their ports at random in
MC_MIN_RPC_PORT..MC_MAX_RPC_PORT: the range is a fixed block (traffic_classes.engine_ports),
which the hosts' NICs and the ToRs classify as KV by port.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
from collections.abc import Callable

from testbed.scenario.base import ScenarioError
from testbed.topologies.traffic_classes import engine_ports
from testbed.workers.kvstream import ShardResult

WHEEL = "mooncake-transfer-engine-non-cuda"
BUFFER_BYTES = 64 << 20  # each engine's registered buffer; a larger shard goes in pieces
POLL_S = 0.0005  # wall seconds between a decode worker's looks while it expects shards
IDLE_POLL_S = 0.02  # and while it expects none (a dozen decode workers polling at POLL_S
# were a third of a core of wake-ups on 2 cores)


class EngineError(OSError):
    """The engine would not start, register, or move a shard: names what and where."""


def engine_env(kv_port: int, persistent: bool) -> dict[str, str]:
    """The engine's settings: TCP even where RDMA devices exist, the fixed port pair, a
    connection pool per peer when the scenario keeps its KV connections (else a
    connection per write, as the engine does by default), errors only in the logs."""
    ports = engine_ports(kv_port)
    low, high = ports[0], ports[-1]
    return {"MC_FORCE_TCP": "1", "MC_MIN_RPC_PORT": str(low), "MC_MAX_RPC_PORT": str(high),
            "MC_TCP_ENABLE_CONNECTION_POOL": "1" if persistent else "0",
            "MC_LOG_LEVEL": "ERROR"}


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
            "installed in this environment (./run.sh setup installs it; x86-64 and "
            "Python 3.11 only)")


class KVEngine:
    """One worker's Transfer Engine and its registered buffer."""

    def __init__(self, host: str, kv_port: int, persistent: bool,
                 capacity: int = BUFFER_BYTES):
        os.environ.update(engine_env(kv_port, persistent))  # read when the engine starts
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

    def endpoint(self) -> dict:
        """What a sender needs to write here: the session and the registered buffer."""
        return {"session": self.session, "addr": self.buffer, "capacity": self.capacity}

    def send_transfer(self, endpoint: dict, request: str, shard_sizes: list[int],
                      stage: str = "p2d") -> list[ShardResult]:
        """Every shard one write (a larger one in pieces, each landed before the next),
        in parallel, as the pusher sends its shards; results in shard order."""
        results: list[ShardResult | BaseException | None] = [None] * len(shard_sizes)

        def one(k: int) -> None:
            try:
                results[k] = self._shard(endpoint, request, k, shard_sizes, stage)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller
                results[k] = exc

        threads = [threading.Thread(target=one, args=(k,)) for k in range(len(shard_sizes))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results  # type: ignore[return-value]

    def _shard(self, endpoint: dict, request: str, k: int, sizes: list[int], stage: str
               ) -> ShardResult:
        # the engine's synchronous write spins its caller on the transfer's status: at
        # the idle policy that spin takes only a core nothing else wants (a waking fabric
        # thread preempts it at once)
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))
        size, piece = sizes[k], min(self.capacity, int(endpoint["capacity"]))
        start = time.time()
        pieces = [min(piece, size - at) for at in range(0, size, piece)] or [0]
        for n, length in enumerate(pieces):
            last = n == len(pieces) - 1
            note = json.dumps({"request": request, "shard": k, "shards": len(sizes),
                               "bytes": size, "stage": stage, "start": start})
            rc = self.te.transfer_sync(endpoint["session"], self.buffer, int(endpoint["addr"]),
                                       max(length, 1), self._write,
                                       self._notify("kv", note) if last else None)
            if rc != 0:
                raise EngineError(f"{request}/{k}: the engine's write to "
                                  f"{endpoint['session']} failed (rc {rc}; the worker's log "
                                  "has the engine's reason)")
        return ShardResult(request, k, len(sizes), size, start, time.time(), stage=stage)


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
                    result = ShardResult(str(head["request"]), int(head["shard"]),
                                         int(head["shards"]), int(head["bytes"]),
                                         float(head["start"]), now, stage=str(head["stage"]))
                except (ValueError, KeyError, TypeError) as exc:
                    self.on_error(f"unreadable notify from {note.name}: {exc}", None)
                    continue
                self._heard(result.request)
                self.on_shard(result)
