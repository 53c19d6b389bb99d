"""Control channels between the router and workers: Unix stream sockets, framed messages.

The router listens on a socket file in the run folder. Worker processes live in the
emulated hosts' network namespaces, but those share the file system, so every worker
reaches the router without touching the emulated fabric: the fabric carries KV and
background bytes only, which keeps the control plane (a few hundred bytes per request)
out of the measurement, like a real cluster's separate front-end network. Each
connection gets a reader thread that hands messages to the owner's RealTimeLoop.
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


def connect(path: Path, name: str, timeout: float = 30.0) -> Connection:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError as exc:
        sock.close()
        raise ConnectionError(f"cannot reach the router at {path}: {exc}") from None
    sock.settimeout(None)
    return Connection(sock, name)


class Listener:
    """Accepts connections on a socket file; each gets on_connect(Connection)."""

    def __init__(self, path: Path, on_connect: Callable[[Connection], None]):
        self.path = Path(path)
        self.path.unlink(missing_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
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
        self.path.unlink(missing_ok=True)
