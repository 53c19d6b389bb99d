"""Sample a run while it goes on (every switch egress's backlog and class counters, each
departure, the CPU, the datapath's and workers' threads, what the machine dropped or held
before the fabric) and hand the samples to the judgement (testbed.emulation.judge)."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from testbed.datapath import tc
from testbed.datapath.backlog import BacklogReader
from testbed.datapath.departures import DepartureTracer
from testbed.datapath.departures import available as can_trace
from testbed.datapath.input_queues import IngressReader, daemons_in
from testbed.emulation.ingress import ingress_judgement
from testbed.emulation.judge import (
    BACKLOG_HZ,
    MIN_BACKLOG_SAMPLES,
    LinkFidelity,
    cpu_busy_fraction,
    saturated,
    standing,
    thread_loads,
    verdict,
)
from testbed.emulation.threads import ThreadSampler, vswitchd_pids


def _read_cpu() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields)
    return total - idle, total


@dataclass
class FidelityMonitor:
    """Samples every switch egress and the CPU in a thread while a run goes on."""

    fabric: object
    interval_s: float = 0.5
    min_queue_packets: int = tc.MIN_QUEUE_PACKETS  # as the HTB leaves were built
    datapath: str | None = None  # kernel | user, for the advice
    netns: dict[str, str] = field(default_factory=dict)  # switch ports outside the root ns
    # (names, include_link=) -> counters, like tc.all_counters; a cluster run's reads
    # every server (remote.counters); this machine's by default
    read: object = None
    # () -> {name: pid} of the worker processes, sampled per thread with the datapath
    workers: object = None
    backlog_hz: float = BACKLOG_HZ  # 0: the snapshot test only; a remote `read` forces it
    # where the per-packet departure trace goes while the run lasts (removed once judged);
    # None, a remote `read` or a kernel without the tracepoints: no per-packet test
    trace_path: Path | None = None
    _tracer: DepartureTracer | None = None
    _trace_error: str | None = None
    _samples: dict[str, list[tuple[float, float, float | None]]] = field(default_factory=dict)
    _backlog: dict[str, list[int]] = field(default_factory=dict)  # intf -> [samples, busy]
    _backlog_lock: threading.Lock = field(default_factory=threading.Lock)
    _fast: threading.Thread | None = None
    _ingress: IngressReader | None = None
    _ingress_error: str | None = None
    _cpu: list[float] = field(default_factory=list)
    _threads: ThreadSampler | None = None
    _loaded: list[bool] = field(default_factory=list)
    # (wall time at the end of the interval, interface, seconds, kv bytes, other bytes)
    usage: list[tuple[float, str, float, int, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._egress = {intf: (node, link) for node, intf, link in
                        self.fabric.egress_interfaces() if node in self.fabric.switches}
        self._queue_bytes = {intf: tc.queue_packets(link.replica_bps, self.min_queue_packets) * 1500
                             for intf, (_, link) in self._egress.items()}

    def start(self) -> FidelityMonitor:
        if self.read is not None:
            self.backlog_hz = 0.0  # another server's queues: counters over SSH only
        if self.backlog_hz > 0:
            self._start_ingress()
            reader = BacklogReader(list(self._egress), self.netns)
            self._fast = threading.Thread(target=self._sample_backlog, args=(reader,),
                                          name="fidelity-backlog", daemon=True)
            self._fast.start()
        if self.backlog_hz > 0 and self.trace_path is not None:
            self._start_trace()
        self._thread = threading.Thread(target=self._loop, name="fidelity", daemon=True)
        self._thread.start()
        return self

    def _start_ingress(self) -> None:
        # this fabric's daemons only: where its switch ports live (fabrics side by side
        # each have their own)
        here = f"/proc/{os.getpid()}/ns/net"
        spaces = {self.netns.get(intf, here) for intf in self._egress}
        try:
            self._ingress = IngressReader(daemons_in(vswitchd_pids(), spaces)).start()
        except (OSError, subprocess.SubprocessError) as exc:
            self._ingress_error = f"the machine's input drops not read: {exc}"

    def _stop_ingress(self) -> dict:
        reader, drops = self._ingress, None
        if reader is None:
            return ingress_judgement(None, [], 0.0, self._ingress_error)
        try:
            drops = reader.stop()
        except (OSError, subprocess.SubprocessError) as exc:
            self._ingress_error = f"the machine's input drops not read: {exc}"
        return ingress_judgement(drops, reader.held, reader.fullest, self._ingress_error,
                                 reader.intake, reader.at)

    def _start_trace(self) -> None:
        if not can_trace():
            self._trace_error = "the kernel's tracepoints cannot be read here (root, tracefs)"
            return
        rates = {intf: link.rate_bps for intf, (_, link) in self._egress.items()}
        try:
            self._tracer = DepartureTracer(rates, self.trace_path, self.netns).start()
        except OSError as exc:
            self._trace_error = f"departure trace not started: {exc}"

    def _stop_trace(self) -> tuple[dict | None, int]:
        if self._tracer is None:
            return None, 0
        try:
            got, lost = self._tracer.stop()
        except OSError as exc:
            self._trace_error = f"departure trace unreadable: {exc}"
            return None, 0
        finally:
            self._tracer = None
            self.trace_path.unlink(missing_ok=True)
        return {intf: (self._link_name(intf), sp) for intf, sp in got.items()}, lost

    def _link_name(self, intf: str) -> str:
        node, link = self._egress[intf]
        return f"{node}>{link.peer_of(node)}"

    def _sample_backlog(self, reader: BacklogReader) -> None:
        period = 1.0 / self.backlog_hz
        due = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    got = reader.read()
                except OSError:
                    got = {}  # a namespace torn down under us: the run is ending
                if self._ingress is not None:
                    # a daemon gone under us: skip the sample, not the sampler
                    with contextlib.suppress(OSError, ValueError):
                        self._ingress.sample()
                with self._backlog_lock:
                    for intf, (backlog, _) in got.items():
                        acc = self._backlog.setdefault(intf, [0, 0])
                        acc[0] += 1
                        acc[1] += backlog > 0
                due += period
                self._stop.wait(max(0.0, due - time.monotonic()))
                due = max(due, time.monotonic() - period)  # late: do not burst to catch up
        finally:
            reader.close()

    def _take_backlog(self) -> dict[str, list[int]]:
        with self._backlog_lock:
            out, self._backlog = self._backlog, {}
        return out

    def _loop(self) -> None:
        self._threads = ThreadSampler(lambda: self.workers() if self.workers else {})
        read = self.read or partial(tc.all_counters, netns=self.netns)
        prev = read(list(self._egress), include_link=True)
        prev_cpu, prev_t = _read_cpu(), time.monotonic()
        self._threads.sample(0.0)
        self._take_backlog()
        while not self._stop.wait(self.interval_s):
            cur = read(list(self._egress), include_link=True)
            fast = self._take_backlog()
            cur_cpu, now = _read_cpu(), time.monotonic()
            dt = now - prev_t
            self._cpu.append(cpu_busy_fraction(prev_cpu, cur_cpu))
            got = self._threads.sample(dt)
            loaded = False
            wall = time.time()
            for intf, per in cur.items():
                link, before = per.get(tc.LINK), prev.get(intf, {}).get(tc.LINK)
                if not link or not before:
                    continue
                kv = per.get("kv", {}).get("bytes", 0) - prev[intf].get("kv", {}).get("bytes", 0)
                total = link["bytes"] - before["bytes"]
                self.usage.append((wall, intf, dt, kv, max(0, total - kv)))
                bps = total * 8 / dt
                n, busy = fast.get(intf, (0, 0))
                if n >= MIN_BACKLOG_SAMPLES:
                    share = standing(n, busy)
                    if share is not None:  # the rate while the queue held packets
                        self._samples.setdefault(intf, []).append((now, bps / share, share))
                        loaded = True
                elif saturated(per, prev.get(intf, {}), self._queue_bytes[intf]):
                    self._samples.setdefault(intf, []).append((now, bps, None))
                    loaded = True
            if got:
                self._loaded.append(loaded)
            prev, prev_cpu, prev_t = cur, cur_cpu, now

    def stop(self, timers: dict[str, dict] | None = None, pushes: dict | None = None) -> dict:
        """`timers`: each worker process's wake-up lateness, `pushes`: how long the KV
        pushes waited for a core (testbed.workers.lateness)."""
        self._stop.set()
        for thread in (self._thread, self._fast):
            if thread is not None:
                thread.join(timeout=5)
        departures, lost = self._stop_trace()
        links = []
        for intf, samples in self._samples.items():
            _, link = self._egress[intf]
            shares = [sh for _, _, sh in samples if sh is not None]
            links.append(LinkFidelity(intf, self._link_name(intf), link.rate_bps,
                                      statistics.median(b for _, b, _ in samples), len(samples),
                                      statistics.median(shares) if shares else None))
        sampler = self._threads
        loads = thread_loads(sampler.samples, self._loaded, sampler.waits,
                             sampler.waited) if sampler else []
        return verdict(links, self._cpu, threads=loads,
                       datapath=self.datapath, backlog_hz=self.backlog_hz or None,
                       departures=departures, departures_lost=lost,
                       departure_error=self._trace_error, timers=timers,
                       pushes=pushes, ingress=self._stop_ingress())

    def link_rows(self, to_modelled, measured) -> list[dict]:
        """links.csv rows (the shared format): utilisation of every switch egress per
        interval, against its configured rate; times in modelled seconds."""
        rows = []
        for wall, intf, dt, kv, other in self.usage:
            node, link = self._egress[intf]
            cap = link.rate_bps * dt / 8
            t = to_modelled(wall)
            rows.append({"time": round(t, 6), "link": f"{node}>{link.peer_of(node)}",
                         "tier": link.tier, "capacity_gbps": link.capacity_gbps,
                         "kv_util": kv / cap, "bg_util": other / cap, "measured": measured(t)})
        return rows
