"""KV transfers as real TCP byte streams: a connection per TP shard at a time (kept for
the next transfer's shard with a ConnectionPool), AF41-marked.

The sender sets IP_TOS before connecting (and again on a kept connection), so every
packet of the shard carries the KV DSCP from the first SYN; the controller also marks
the KV port, as a safety net. Byte
counts on the wire are the modelled shard size x the emulation's scale factor.

With priority levels (MFS and its baselines) a shard goes layer by layer: at each layer
boundary the sender asks its Marking for the level (and, for Karuna, a pacing rate) and
re-marks the socket's TOS if the level changed; the controller trusts level DSCPs. A
small TCP_NOTSENT_LOWAT keeps the unsent backlog to about a layer, so a new TOS reaches
the wire with the next layer rather than after everything already queued.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from testbed.model.granularity import split_bytes
from testbed.topologies.traffic_classes import KV, level_tos
from testbed.workers import tcpinfo
from testbed.workers.lateness import run_queue_wait
from testbed.workers.protocol import kv_header, read_exact, read_kv_header

CHUNK = 256 * 1024
_ZEROS = memoryview(bytes(CHUNK))
NOTSENT_LOWAT = 8192  # bytes of unsent data the kernel may hold before send() blocks
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)


@dataclass(frozen=True)
class Marking:
    """How a sender marks one shard: `decide(sent, total)` -> (level, rate in wire
    bytes/s or None), asked at every layer boundary; levels + 1 is the scavenger."""

    decide: Callable[[int, int], tuple[int, float | None]]
    levels: int
    layers: int
    recheck_s: float | None = None  # wall seconds a stalled send waits before re-asking


@dataclass(frozen=True)
class ShardResult:
    request: str
    shard: int
    shards: int
    bytes: int
    start: float  # wall clock, first byte of payload
    end: float  # wall clock, last byte
    level_bytes: dict[int, int] | None = None  # payload bytes sent per priority level
    stage: str = "p2d"  # or "reuse": a KV-reuse fetch
    tcp: dict | None = None  # the sender's TCP_INFO at the end (tcpinfo.parse)
    cpu_wait: float | None = None  # wall s its thread waited for a core while sending


def kv_socket(tos: int = KV.tos, congestion: str | None = None) -> socket.socket:
    """A TCP socket whose every packet carries `tos` (the KV class's AF41 by default),
    with the given congestion control (None or "system": the host's default)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    if congestion and congestion != "system":
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
        except OSError as exc:
            sock.close()
            raise OSError(f"TCP congestion control {congestion!r} unavailable here ({exc}); "
                          "see net.ipv4.tcp_available_congestion_control") from None
    return sock


class ConnectionPool:
    """Idle KV connections kept for the next shard to the same receiver, as a serving
    system keeps its transport's (NCCL, Mooncake's transfer engine): no handshake, SYN or
    teardown per transfer, which on the replica cost a round trip of milliseconds and,
    queued behind data, a dropped SYN's 1 s timeout. Keyed by receiver, shard index,
    congestion control and send mode (each sets socket options once). One shard at a
    time per connection: a transfer that finds none idle opens one."""

    def __init__(self) -> None:
        self._idle: dict[tuple, list[socket.socket]] = {}
        self._seen: dict[int, dict] = {}  # fileno -> TCP_INFO when its last shard ended
        self._lock = threading.Lock()

    def take(self, key: tuple) -> socket.socket | None:
        """An idle connection for `key` whose receiver has not closed it, or None."""
        while True:
            with self._lock:
                idle = self._idle.get(key)
                sock = idle.pop() if idle else None
            if sock is None or alive(sock):
                return sock
            self.drop(sock)

    def give(self, key: tuple, sock: socket.socket) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(sock)

    def drop(self, sock: socket.socket) -> None:
        self._seen.pop(sock.fileno(), None)
        sock.close()

    def stalls(self, sock: socket.socket, now: dict | None) -> dict | None:
        """TCP_INFO's counters over this shard alone: the connection's since its last
        shard (resent segments, timeouts and their time are counted per connection)."""
        if now is None:
            return None
        before = self._seen.get(sock.fileno())
        self._seen[sock.fileno()] = now
        if before is None:
            return now
        counters = tcpinfo.RECORDED + tcpinfo.LIMITS
        return {k: (v - before[k] if k in counters and v is not None
                    and before.get(k) is not None else v) for k, v in now.items()}

    def keep_open(self, host: str, port: int, shards: int, n: int,
                  congestion: str | None = None) -> None:
        """Leave at least n idle connections for each of `shards` shard indexes, each
        carried one byte (handshake and slow start's first round done), so that n
        transfers started together all find theirs. Each is held out of the pool until all
        are open: warm-up transfers started together need not overlap, and those that do
        not would share one connection."""
        held: list[tuple[tuple, socket.socket]] = []
        try:
            for _ in range(n):
                send_transfer(host, port, "warm", [1] * shards, congestion=congestion,
                              pool=self)
                for k in range(shards):
                    key = (host, port, k, congestion, _mode(None, 1))
                    held.append((key, self.take(key)))
        finally:
            for key, sock in held:
                if sock is not None:
                    self.give(key, sock)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for socks in idle.values():
            for sock in socks:
                sock.close()
        self._seen.clear()


def alive(sock: socket.socket) -> bool:
    """An idle kept connection is usable while nothing is readable on it: the receiver
    sends nothing between shards, so EOF, bytes or an error mean it closed or reset."""
    poller = select.poll()  # not select(): a worker may hold more than 1024 descriptors
    try:
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


def _mode(marking: Marking | None, calls: int) -> str:
    return "levels" if marking is not None else "calls" if calls > 1 else "plain"


def _open(host: str, port: int, tos: int, congestion: str | None,
          marking: Marking | None, timeout: float, keep: bool) -> socket.socket:
    """A new KV connection. A kept one has Nagle off: no FIN pushes its shard's last
    partial segment out, and Nagle would hold it until the header's ACK, which the
    receiver's delayed ACK holds back (tens of ms on the replica's wire)."""
    sock = kv_socket(tos, congestion)
    try:
        sock.settimeout(timeout)
        if marking is not None:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
        if keep:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def send_shard(host: str, port: int, request: str, shard: int, shards: int, size: int,
               tos: int = KV.tos, timeout: float = 300.0,
               congestion: str | None = None, marking: Marking | None = None,
               calls: int = 1, stage: str = "p2d",
               pool: ConnectionPool | None = None) -> ShardResult:
    """One shard on its own connection, or on an idle one of `pool` (kept for the next).
    calls > 1: as that many messages, each framed and acknowledged before the next
    (block-wise or segment transfers)."""
    level_bytes: dict[int, int] | None = None
    calls = max(1, min(calls, size)) if size > 0 else 1
    if marking is not None:
        level, _ = marking.decide(0, size)
        tos = level_tos(level, marking.levels)
    key = (host, port, shard, congestion, _mode(marking, calls))
    sock = pool.take(key) if pool is not None else None
    if sock is None:
        sock = _open(host, port, tos, congestion, marking, timeout, keep=pool is not None)
    else:  # its last shard may have left another level's TOS or the layers' timeout
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        sock.settimeout(timeout)
    try:
        start, waited = time.time(), run_queue_wait()
        sock.sendall(kv_header(request, shard, shards, size, calls, stage,
                               keep=pool is not None))
        if calls > 1:
            level_bytes = _send_calls(sock, size, calls, marking, level if marking else 0)
        elif marking is None:
            _send_zeros(sock, size)
        else:
            level_bytes = _send_layers(sock, size, marking, level)
            sock.settimeout(timeout)
        if pool is None:
            sock.shutdown(socket.SHUT_WR)
        ack = sock.recv(1)  # the receiver acknowledges once every byte has landed
        if ack != b"\x01":
            raise ConnectionError(f"{request}/{shard}: receiver closed without acknowledging")
        end, now_waited = time.time(), run_queue_wait()
        tcp = tcpinfo.read(sock)
        if pool is not None:
            tcp = pool.stalls(sock, tcp)
    except BaseException:
        if pool is not None:
            pool.drop(sock)
        else:
            sock.close()
        raise
    if pool is not None:
        pool.give(key, sock)
    else:
        sock.close()
    return ShardResult(request, shard, shards, size, start, end, level_bytes, stage, tcp,
                       None if waited is None or now_waited is None else now_waited - waited)


def _send_zeros(sock: socket.socket, size: int) -> None:
    left = size
    while left:
        n = min(left, CHUNK)
        sock.sendall(_ZEROS[:n])
        left -= n


def _send_calls(sock: socket.socket, size: int, calls: int, marking: Marking | None,
                level: int) -> dict[int, int] | None:
    """Each call a framed message that completes (the receiver's 0x02) before the next:
    what a blocking send per KV block costs on the wire. Nagle is off, as NCCL's
    transport would not wait to coalesce."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent, out = 0, {}
    for n in split_bytes(size, calls):
        if marking is not None:
            new, _ = marking.decide(sent, size)
            if new != level:
                level = new
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS,
                                level_tos(level, marking.levels))
        sock.sendall(struct.pack("!I", n) + bytes(_ZEROS[:min(n, 4096)]))
        if n > 4096:
            _send_zeros(sock, n - 4096)
        if sock.recv(1) != b"\x02":
            raise ConnectionError(f"call {len(out)} of {calls}: no completion")
        sent += n
        out[level] = out.get(level, 0) + n
    return out if marking is not None else None


def _send_layers(sock: socket.socket, size: int, marking: Marking, level: int
                 ) -> dict[int, int]:
    """One chunk per layer; the level (DSCP) changes at layer boundaries, and also when a
    send has stalled for recheck_s: a starved low-level flow must still be promoted (the
    flow model re-evaluates every reprioritize_s whatever a flow's progress), and its
    queued packets are stuck behind higher levels anyway."""
    per_layer = max(1, -(-size // marking.layers))
    sent, layer_start, layer_end, out = 0, 0, 0, {}
    began = time.monotonic()
    rate = None
    sock.settimeout(marking.recheck_s)
    while sent < size:
        if sent >= layer_end:  # a layer boundary
            if rate:  # paced (Karuna): no faster than the rate, layer by layer
                time.sleep(max(0.0, began + (layer_end - layer_start) / rate - time.monotonic()))
            layer_start, layer_end = layer_end, min(size, layer_end + per_layer)
            began = time.monotonic()
        new, rate = marking.decide(sent, size)
        if new != level:
            level = new
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, level_tos(level, marking.levels))
        while sent < layer_end:
            try:
                n = sock.send(_ZEROS[:min(layer_end - sent, CHUNK)])
            except TimeoutError:
                break  # stalled: ask for the level again
            sent += n
            out[level] = out.get(level, 0) + n
    return out


def send_transfer(host: str, port: int, request: str, shard_sizes: list[int],
                  tos: int = KV.tos, congestion: str | None = None,
                  marking: Callable[[int], Marking] | None = None,
                  calls: int = 1, stage: str = "p2d",
                  pool: ConnectionPool | None = None) -> list[ShardResult]:
    """Send every shard on its own connection (one of `pool`'s if given), in parallel;
    results in shard order."""
    return per_shard(len(shard_sizes), lambda k: send_shard(
        host, port, request, k, len(shard_sizes), shard_sizes[k], tos, congestion=congestion,
        marking=marking(k) if marking else None, calls=calls, stage=stage, pool=pool))


def per_shard(n: int, send: Callable[[int], ShardResult]) -> list[ShardResult]:
    """send(k) for every shard k on a thread of its own, all at once, as a transfer's TP
    shards go; results in shard order, the first error raised here."""
    results: list[ShardResult | BaseException | None] = [None] * n

    def one(k: int) -> None:
        try:
            results[k] = send(k)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller
            results[k] = exc

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results  # type: ignore[return-value]


def _drain(conn: socket.socket, size: int) -> None:
    left = size
    while left:
        chunk = conn.recv(min(left, CHUNK))
        if not chunk:
            raise ConnectionError(f"stream ended with {left} bytes missing")
        left -= len(chunk)


class KVReceiver:
    """Accepts KV shard streams; calls on_shard(ShardResult) when a shard has fully landed."""

    def __init__(self, host: str, port: int, on_shard: Callable[[ShardResult], None],
                 on_error: Callable[[str, str | None], None] | None = None):
        """on_error(why, request id if the header had arrived)."""
        self.on_shard = on_shard
        self.on_error = on_error or (lambda _msg, _rid: None)
        self.sock = socket.create_server((host, port), reuse_port=False)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="kv-accept", daemon=True)
        self._closed = False

    def start(self) -> KVReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        self.sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _calls(conn: socket.socket, size: int, calls: int) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        got = 0
        for k in range(calls):
            (n,) = struct.unpack("!I", read_exact(conn.recv, 4) or b"\0\0\0\0")
            if got + n > size:
                raise ConnectionError(f"call {k} overruns the announced {size} bytes")
            _drain(conn, n)
            got += n
            conn.sendall(b"\x02")
        if got != size:
            raise ConnectionError(f"{calls} calls carried {got} of {size} bytes")

    def _serve(self, conn: socket.socket) -> None:
        """Shards on one connection: one, or while the sender keeps it (header "keep"),
        each acknowledged and reported as it lands."""
        with conn:
            got = self._one(conn, end_ok=False)
            while got is not None and got[1]:  # kept: report it, then wait for the next
                self.on_shard(got[0])
                got = self._one(conn, end_ok=True)
        if got is not None:  # the last, on a connection now closed
            self.on_shard(got[0])

    def _one(self, conn: socket.socket, end_ok: bool) -> tuple[ShardResult, bool] | None:
        """The next shard on `conn` and whether the sender keeps the connection; None at
        its end, or after an error (reported)."""
        head: dict | None = {}
        try:
            head = read_kv_header(conn.recv, end_ok=end_ok)
            if head is None:
                return None
            start = time.time()
            if head.get("calls", 1) > 1:
                self._calls(conn, head["bytes"], head["calls"])
            else:
                _drain(conn, head["bytes"])
            keep = bool(head.get("keep"))
            if keep:  # no FIN follows to push the acknowledgement (see _open)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            elif read_exact(conn.recv, 1):
                raise ConnectionError("more bytes than the header announced")
            result = ShardResult(str(head["request"]), int(head["shard"]),
                                 int(head["shards"]), int(head["bytes"]), start, time.time(),
                                 stage=str(head.get("stage", "p2d")))
            conn.sendall(b"\x01")
        except (OSError, ValueError) as exc:
            self.on_error(str(exc), (head or {}).get("request"))
            return None
        return result, keep
