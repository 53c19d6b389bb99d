"""KV through Mooncake's Transfer Engine (emulation.kv_transport: mooncake), as SGLang's
and vLLM's Mooncake connectors move it: an engine per worker in its host's namespace,
TCP transport, P2P handshake (no metadata server); decode workers register a KV buffer
and prefill workers write each TP shard into it.

When a transfer has landed: the engine's TCP protocol (v2) completes a write only once
the target has applied its last byte and acknowledged it. The sender submits every
shard's write at once and awaits each without spinning (Completions); the shard's record
ends there, at the acknowledgement, as the pusher's does. Then a notice naming the
transfer's shards goes to the target's notice port on a kept connection (the connectors'
side channel), and the decode worker lands them on its arrival: the pusher's receiver
lands a shard at its last byte, so the decode instance hears of an engine's transfer
about one round trip later (the acknowledgement, then the notice).

The engine's sockets carry no DSCP and pick their ports at random in
MC_MIN_RPC_PORT..MC_MAX_RPC_PORT: the range is a fixed block (traffic_classes.engine_ports),
which the hosts' NICs and the ToRs classify as KV by port.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable

from testbed.clock import Dilation
from testbed.scenario.base import ScenarioError
from testbed.topologies.traffic_classes import ENGINE_LANES, engine_notice, engine_ports
from testbed.workers.engine_tcp import EngineStalls
from testbed.workers.kvstream import ShardResult, alive, kv_socket, per_shard

WHEEL = "mooncake-transfer-engine-non-cuda"
BUFFER_BYTES = 64 << 20  # each engine's registered buffer; a larger shard goes in pieces
POLL_S = 0.0005  # wall seconds between looks at writes' statuses
NOTICE_TIMEOUT_S = 60.0  # wall seconds to connect to a target's notice port, or send
WRITE_TIMEOUT_S = 600.0  # wall seconds a write may take before the transfer fails


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
            "MC_TCP_LANES_PER_PEER": str(ENGINE_LANES),
            "MC_LOG_LEVEL": "ERROR",
            **{k: str(math.ceil(wall(v))) for k, v in ENGINE_TIMEOUTS_S.items()}}


def installed() -> bool:
    return importlib.util.find_spec("mooncake") is not None and \
        importlib.util.find_spec("mooncake.engine") is not None


def engine_available(scenario, lacking: dict[str, str] | None = None) -> None:
    """Refuse, before anything starts, a mooncake run this machine, or a server of its
    cluster (`lacking`: server -> why it cannot import the engine), cannot carry."""
    if scenario.emulation.kv_transport != "mooncake":
        return
    if lacking:
        raise ScenarioError(
            f"emulation.kv_transport mooncake: Mooncake's Transfer Engine ({WHEEL}) cannot "
            "be imported on " + "; ".join(f"{s} ({why})" for s, why in lacking.items()) +
            " (`testbed provision -i INVENTORY` installs it there)")
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
            from mooncake.engine import TransferEngine
        except ImportError as exc:
            raise EngineError(f"Mooncake's Transfer Engine cannot be imported ({exc}); "
                              f"install {WHEEL}") from None
        self.te = TransferEngine()
        rc = self.te.initialize(host, "P2PHANDSHAKE", "tcp", "")
        if rc != 0:
            ports = engine_ports(kv_port)
            raise EngineError(f"the Transfer Engine did not start on {host} (rc {rc}; two "
                              f"of ports {ports[0]}-{ports[-1]} must be free there)")
        self.session = f"{host}:{self.te.get_rpc_port()}"
        self.host, self.kv_port = host, kv_port  # a decode worker's notices arrive there
        self.notices = NoticeSender()
        self.capacity = capacity
        self.buffer = self.te.allocate_managed_buffer(capacity)
        if not self.buffer:
            raise EngineError(f"{self.session}: registering a {capacity}-byte KV buffer "
                              "was refused")
        self.completions = Completions(self.te)
        self.stalls = EngineStalls()
        self._met: set[str] = set()  # sessions this engine has written to once
        self._meeting: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def endpoint(self) -> dict:
        """What a sender needs to write here: the session, the registered buffer, and the
        port its notices go to."""
        return {"session": self.session, "addr": self.buffer, "capacity": self.capacity,
                "notice": self.kv_port}

    def send_transfer(self, endpoint: dict, request: str, shard_sizes: list[int],
                      stage: str = "p2d") -> list[ShardResult]:
        """Every shard one write (a larger one in pieces, each landed before the next),
        all in parallel as the pusher sends its shards, then one notice to the target
        naming them; results in shard order."""
        results = per_shard(len(shard_sizes),
                            lambda k: self._shard(endpoint, request, k, shard_sizes, stage))
        line = engine_notice(request, stage, min(r.start for r in results),
                             [[r.shard, r.bytes] for r in results])
        self.notices.send(endpoint["session"].rpartition(":")[0], int(endpoint["notice"]),
                          request, line)
        return results

    def _shard(self, endpoint: dict, request: str, k: int, sizes: list[int], stage: str
               ) -> ShardResult:
        size, piece = sizes[k], min(self.capacity, int(endpoint["capacity"]))
        start = time.time()
        for at in range(0, max(size, 1), piece):
            status = self._write(endpoint, max(1, min(piece, size - at)))
            if status != 1:
                raise EngineError(f"{request}/{k}: the engine's write to "
                                  f"{endpoint['session']} failed (status {status}; the "
                                  "worker's log has the engine's reason)")
        end = time.time()
        tcp = self.stalls.look(endpoint["session"].rpartition(":")[0],
                               engine_ports(int(endpoint["notice"])))
        return ShardResult(request, k, len(sizes), size, start, end, stage=stage, tcp=tcp)

    def _write(self, endpoint: dict, size: int) -> int:
        """One write, awaited; the first to a session alone. A first write makes the
        engine exchange descriptors with the target's handshake server, and a
        transfer's shards arriving there at once were refused ('unexpected handshake
        message type', the write failed): so shards wait for the first to pass."""
        session = endpoint["session"]
        if session in self._met:
            return self._submit(endpoint, size)
        with self._lock:
            meeting = self._meeting.setdefault(session, threading.Lock())
        with meeting:
            if session not in self._met:  # else it passed while this one waited
                status = self._submit(endpoint, size)
                if status == 1:
                    self._met.add(session)
                return status
        return self._submit(endpoint, size)

    def _submit(self, endpoint: dict, size: int) -> int:
        batch = self.te.transfer_submit_write(endpoint["session"], self.buffer,
                                              int(endpoint["addr"]), size)
        return self.completions.wait(batch) if batch else -1


class NoticeSender:
    """Lands a transfer at its target: a JSON line naming its shards, sent once the
    engine has acknowledged every write, on a connection kept per target (AF41, Nagle
    off), as the serving connectors tell their decode side over a side channel of
    their own. The engine's own notify (a one-byte write carrying it) was lost under
    load with nothing said to its caller ('unexpected handshake message type'), and
    a decode worker had to poll for it."""

    def __init__(self) -> None:
        self._socks: dict[tuple[str, int], socket.socket] = {}
        self._locks: dict[tuple[str, int], threading.Lock] = {}
        self._lock = threading.Lock()

    def send(self, host: str, port: int, request: str, line: bytes) -> None:
        where = (host, port)
        with self._lock:
            lock = self._locks.setdefault(where, threading.Lock())
        with lock:
            for attempt in (1, 2):  # a kept connection the target closed: once more
                sock = self._socks.pop(where, None)
                if sock is not None and not alive(sock):  # the target closed it idle:
                    sock.close()  # a send would still succeed, into a dead connection
                    sock = None
                try:
                    if sock is None:
                        sock = kv_socket()
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        sock.settimeout(NOTICE_TIMEOUT_S)
                        sock.connect(where)
                    sock.sendall(line)
                    self._socks[where] = sock
                    return
                except OSError as exc:
                    if sock is not None:
                        sock.close()
                    if attempt == 2:
                        raise EngineError(f"{request}: the notice to {host}:{port} "
                                          f"failed ({exc})") from None

    def close(self) -> None:
        with self._lock:
            for sock in self._socks.values():
                sock.close()
            self._socks.clear()


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
    """Calls on_shard(ShardResult) for every shard a notice names, at the notice's
    arrival: the engine has applied the bytes by then (its writes complete at the
    target's acknowledgement). Listens on the engine's notice port (kv_port, which the
    pusher would use: classified KV), a thread per sender, blocking: no polling."""

    def __init__(self, engine: KVEngine, on_shard: Callable[[ShardResult], None],
                 on_error: Callable[[str, str | None], None]):
        self.on_shard, self.on_error = on_shard, on_error
        self.sock = socket.create_server((engine.host, engine.kv_port), reuse_port=False)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="kv-notices", daemon=True)

    def start(self) -> EngineReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stops listening at once (a close alone leaves a blocked accept listening)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()

    def _serve(self, conn: socket.socket, peer) -> None:
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                now = time.time()
                try:
                    head = json.loads(line)
                    shards = [(int(k), int(n)) for k, n in head["shards"]]
                    results = [ShardResult(str(head["request"]), k, len(shards), n,
                                           float(head["start"]), now,
                                           stage=str(head["stage"])) for k, n in shards]
                except (ValueError, KeyError, TypeError) as exc:
                    self.on_error(f"unreadable notice from {peer[0]}: {exc}", None)
                    continue
                for result in results:
                    self.on_shard(result)
