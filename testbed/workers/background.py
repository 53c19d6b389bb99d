"""Background traffic: real TCP flows in the best-effort class at an offered load per tier.

Every instance host runs a sink and, for each tier k with a background fraction f_k > 0,
one paced TCP stream to a partner host at tier k, at f_k x the tier's per-path bandwidth
(scaled and dilated like the fabric). The partner is the next host, in index order, at
that tier. Unlike the flow model's per-link fractions, a stream also loads the lower-tier
links on its path, and ECMP hashing spreads streams unevenly: the controller's measured
congestion (what the oracle serves) is the ground truth of a run, not f_k.
"""

from __future__ import annotations

import socket
import threading
import time

from testbed.clock import Dilation
from testbed.topologies.replica import background_partner as partner
from testbed.topologies.traffic_classes import BACKGROUND

CHUNK = 16 * 1024
_ZEROS = bytes(CHUNK)


def stream_rate_bps(fraction: float, tier_gbps: float, scale: float, dilation: float) -> float:
    return Dilation(dilation).wall_rate(fraction * tier_gbps * 1e9 * scale)


class BackgroundTraffic:
    def __init__(self, spec, instance: str, ip: str, hosts: dict[str, str], port: int,
                 fractions: dict[int, float], scale: float, dilation: float):
        self.spec, self.instance, self.hosts = spec, instance, hosts
        self.scale, self.dilation = scale, dilation
        self.streams = []
        for tier, f in sorted(fractions.items()):
            other = partner(spec, instance, tier) if f > 0 else None
            if other is not None:
                rate = stream_rate_bps(f, spec.tier_bandwidth_gbps[tier], scale, dilation)
                self.streams.append((hosts[other], rate))
        self.ip, self.port = ip, port
        self._stop = threading.Event()
        self.sent_bytes = 0
        self._sink = None

    def start(self) -> BackgroundTraffic:
        self._sink = socket.create_server((self.ip, self.port))
        threading.Thread(target=self._accept, daemon=True, name="bg-sink").start()
        for host, rate in self.streams:
            threading.Thread(target=self._send, args=(host, rate), daemon=True,
                             name=f"bg-{host}").start()
        return self

    def surge(self, tier: int, fraction: float, until_wall: float) -> bool:
        """An extra stream at `fraction` of the tier until a wall-clock time (a fault)."""
        other = partner(self.spec, self.instance, tier)
        if other is None or fraction <= 0:
            return False
        if self._sink is None:
            self._sink = socket.create_server((self.ip, self.port))
            threading.Thread(target=self._accept, daemon=True, name="bg-sink").start()
        rate = stream_rate_bps(fraction, self.spec.tier_bandwidth_gbps[tier], self.scale,
                               self.dilation)
        threading.Thread(target=self._send, args=(self.hosts[other], rate, until_wall),
                         daemon=True, name=f"surge-{tier}").start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._sink is not None:
            self._sink.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sink.accept()
            except OSError:
                return
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        with conn:
            while not self._stop.is_set():
                try:
                    if not conn.recv(1 << 16):
                        return
                except OSError:
                    return

    def _send(self, host: str, rate_bps: float, until_wall: float = float("inf")) -> None:
        """Paced in 16 KiB writes: the long-run rate is rate_bps, bursts one chunk."""
        deadline = time.monotonic() + 30.0
        sock = None
        while sock is None and not self._stop.is_set() and time.monotonic() < deadline:
            try:
                sock = socket.create_connection((host, self.port), timeout=2.0)
            except OSError:
                self._stop.wait(0.2)  # the partner's sink may not be listening yet
        if sock is None:
            return
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, BACKGROUND.tos)
        interval = CHUNK * 8 / rate_bps
        next_at = time.monotonic()
        with sock:
            while not self._stop.is_set() and time.time() < until_wall:
                try:
                    sock.sendall(_ZEROS)
                except OSError:
                    return
                self.sent_bytes += CHUNK
                next_at += interval
                self._stop.wait(max(0.0, next_at - time.monotonic()))
