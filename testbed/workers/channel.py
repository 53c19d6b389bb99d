"""Control channels between the router and workers: stream sockets, framed messages.

On one machine the router listens on a socket file in the run folder. Worker processes
live in the emulated hosts' network namespaces, but those share the file system, so every
worker reaches the router without touching the emulated fabric: the fabric carries KV and
background bytes only, which keeps the control plane (a few hundred bytes per request)
out of the measurement, like a real cluster's separate front-end network. A run spread
over several machines uses TCP on their management network instead (an address
`tcp:HOST:PORT`); its workers connect before they enter their host's namespace, so the
connection stays on the management network. Each connection gets a reader thread that
hands messages to the owner's RealTimeLoop.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from testbed.workers.protocol import ProtocolError, encode, read_message


class Connection:
    """One framed, thread-safe duplex message stream."""

    def __init__(self, sock: socket.socket, name: str = "?"):
        self.sock = sock
        self.name = name
        self._lock = threading.Lock()
        self.closed = False

    def send(self, msg: dict) -> None:
        data = encode(msg)
        with self._lock:
            self.sock.sendall(data)

    def read_forever(self, on_message: Callable[[Connection, dict], None],
                     on_close: Callable[[Connection, str], None]) -> threading.Thread:
        def reader() -> None:
            why = "closed by peer"
            try:
                while True:
                    msg = read_message(self.sock.recv)
                    if msg is None:
                        break
                    on_message(self, msg)
            except (OSError, ProtocolError) as exc:
                why = str(exc)
            self.closed = True
            on_close(self, why)

        thread = threading.Thread(target=reader, name=f"read-{self.name}", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def tcp_address(address: str | Path) -> tuple[str, int] | None:
    """(host, port) of a `tcp:HOST:PORT` address; None for a socket file's path."""
    text = str(address)
    if not text.startswith("tcp:"):
        return None
    host, _, port = text[4:].rpartition(":")
    return host, int(port)


def _socket(address: str | Path) -> tuple[socket.socket, object]:
    tcp = tcp_address(address)
    if tcp is None:
        return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), str(address)
    return socket.socket(socket.AF_INET, socket.SOCK_STREAM), tcp


def connect(address: str | Path, name: str, timeout: float = 30.0) -> Connection:
    """A connection to the router at a socket file or `tcp:HOST:PORT`."""
    sock, where = _socket(address)
    sock.settimeout(timeout)
    try:
        sock.connect(where)
    except OSError as exc:
        sock.close()
        raise ConnectionError(f"cannot reach the router at {address}: {exc}") from None
    sock.settimeout(None)
    if tcp_address(address):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Connection(sock, name)


def listening(address: str | Path) -> bool:
    """Whether a router accepts connections there yet."""
    if tcp_address(address) is None:
        return Path(address).exists()
    try:
        connect(address, "probe", timeout=1.0).close()
    except ConnectionError:
        return False
    return True


class Listener:
    """Accepts connections on a socket file or `tcp:HOST:PORT`; each gets
    on_connect(Connection)."""

    def __init__(self, address: str | Path, on_connect: Callable[[Connection], None]):
        self.sock, where = _socket(address)
        self.path = None if tcp_address(address) else Path(address)
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        else:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(where)
        self.sock.listen(128)
        self.on_connect = on_connect
        self._thread = threading.Thread(target=self._accept, name="accept", daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.sock.accept()
            except OSError:
                return
            self.on_connect(Connection(sock))

    def close(self) -> None:
        self.sock.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)
