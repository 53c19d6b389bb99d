"""The router's side of the control protocol: workers connecting and closing, messages
dispatched and broadcast, heartbeats and state reports, and the clock handshake that
starts every worker of a run on one modelled time zero."""

from __future__ import annotations

import contextlib
import threading
import time

from testbed.workers.channel import Connection
from testbed.workers.realtime import CLOCK_PROBES, clock_sample

START_MARGIN_S = 0.5  # wall seconds between "start" and modelled time zero


class ControlLink:
    """Router's control connections and run start."""

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

    def _on_state(self, msg: dict) -> None:
        view = self.views.get(msg["instance"])
        if view is not None:
            view.apply(msg)

    def _on_kv_endpoint(self, msg: dict) -> None:
        """A decode worker's Transfer Engine (kv_transport: mooncake): its session and
        registered buffer, which every decision to it carries to the sender."""
        self.kv_endpoints[msg["instance"]] = {k: msg[k] for k in ("session", "addr", "capacity",
                                                                 "notice")}

    def _on_heartbeat(self, msg: dict) -> None:
        self.faults.last_beat[msg["instance"]] = self.loop.now
        if msg.get("error"):
            self.ledger.errors.append(f"{msg['instance']}: {msg['error']}")

    def _on_loadgen_done(self, msg: dict) -> None:
        self.expected = int(msg["count"])
        self.loop.at(self.last_arrival + self.scenario.drain_s, self._drain_limit)
        self._check_done()

    # -- faults and recovery -----------------------------------------------------------------
    def _hello_timeout(self) -> None:
        missing = self.expected_workers - set(self.conns)
        if missing and not hasattr(self, "t0"):
            self.outcome = f"workers never connected: {', '.join(sorted(missing))}"
            self.loop.stop()

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
        self.loop.watch()
        self.t0 = t0
        threading.Thread(target=self._refresh_oracle, daemon=True, name="oracle").start()
        threading.Thread(target=self._post_intents, daemon=True, name="intents").start()
        for name, conn in self.conns.items():  # t0 on each worker's own clock
            with contextlib.suppress(OSError):
                conn.send({"type": "start", "t0": t0 + self.clock_offsets.get(name, 0.0)})
        self._heartbeats_at(self.scenario.recovery.heartbeat_s)
        for fault in self.scenario.faults:
            self.loop.at(fault.at_s, lambda fault=fault: self._inject(fault))
        if self.flowkv is not None:
            self.flowkv.start()
