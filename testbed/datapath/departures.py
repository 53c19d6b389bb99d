"""Every packet's arrival at and departure from a switch egress's qdisc, from the kernel's
own tracepoints, and Mininet-HiFi's per-packet test on them.

A link is faithful when, while its queue holds packets, it keeps its wire busy: each
departure comes no later than the moment the emulated wire would have finished sending
everything before it (a wire clock: the previous packet's end, or its departure if the
wire was idle then, plus its size / rate). A departure later than that by more than one
full frame's time is *late*: the machine, not the traffic, held the link idle while a
packet waited (a softirq or timer that ran late, a starved core). The share of late
departures among those made with a queue is the link's figure (Handigol et al., CoNEXT
2012, test the same invariant on dequeue events). The wire clock, not the gap to the
previous departure, is the reference because HTB releases some packets early: each class
has a token bucket of its own, so a small packet of another class (an ACK) or the bucket's
one frame of burst leaves ahead of the wire, and the next packet, sent on time, would look
a frame late after it although the link lost nothing (measured on a loaded fabric: 3.8%
of one uplink's queued departures "late" to the previous one, 0 late to the wire).

The events: net:net_dev_queue (device name, skb, length; just before the qdisc),
qdisc:qdisc_enqueue (accepted: a dropped packet never counts as queued) and
qdisc:qdisc_dequeue (packets > 0). They are recorded into a private tracefs instance
(its own buffer and filters, so a user's tracing is left alone) on the monotonic clock,
streamed to a file by `cat` (no Python on the hot path), and read after the run. The
qdisc events carry an ifindex, which is per namespace; an event is attributed to the
device whose net_dev_queue last saw the same skb and whose ifindex matches.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.datapath.tc import ifindexes, per_namespace
from testbed.model.tcp import WIRE_FRAME

TRACEFS = Path("/sys/kernel/tracing")
INSTANCE_PREFIX = "netkv-"
EVENTS = ("net/net_dev_queue", "qdisc/qdisc_enqueue", "qdisc/qdisc_dequeue")
BUFFER_KB = 8192  # per CPU: ~60k events, seconds of a loaded fabric if `cat` falls behind
PR_SET_PDEATHSIG = 1
MAX_FILTER = 3500  # characters; a longer filter (a huge fabric) traces every device

_LINE = re.compile(r"\s(\d+\.\d+): (net_dev_queue|qdisc_enqueue|qdisc_dequeue): (.*)$")
_QUEUE = re.compile(r"dev=(\S+) skbaddr=(\w+) len=(\d+)")
_ENQUEUE = re.compile(r"ifindex=(\d+) .*skbaddr=(\w+)")
_DEQUEUE = re.compile(r"ifindex=(\d+) .*packets=(\d+) skbaddr=(\w+)")


@dataclass(frozen=True)
class Spacing:
    """One link's departures made while its queue held packets."""

    judged: int
    late: int  # later than the wire clock by more than one frame's time
    p99_late_frames: float | None  # lateness's 99th percentile, in frame times (<0: ahead
    # of the wire; HTB's one frame of burst keeps a loaded link about one frame ahead)
    sent_bytes: int = 0  # every departure's, queued or not
    first_s: float | None = None  # the first and last departure, monotonic clock
    last_s: float | None = None

    def idle_share(self, rate_bps: float) -> float | None:
        """The share of first..last departure the link spent not sending: a
        work-conserving link with these bytes would have been busy sent_bytes / rate."""
        if self.first_s is None or self.last_s is None or self.last_s <= self.first_s:
            return None
        return max(0.0, 1 - self.sent_bytes * 8 / rate_bps / (self.last_s - self.first_s))

    @property
    def late_share(self) -> float | None:
        return self.late / self.judged if self.judged else None


@dataclass
class _Link:
    rate_bps: float
    queued: int = 0
    last_t: float | None = None
    wire_free: float = 0.0  # when the wire would have sent every departure so far
    busy: bool = False  # the queue held packets right after the last departure
    judged: int = 0
    late: int = 0
    sent: int = 0
    first_t: float | None = None
    lateness: list[float] = field(default_factory=list)


def spacing(lines, links: dict[str, tuple[int, float]]) -> dict[str, Spacing]:
    """Trace lines (tracefs text, in time order) -> per device in `links` (name ->
    (ifindex, rate bps)) its departure-spacing figures. Devices with no departure made
    with a queue are left out."""
    state = {name: _Link(rate) for name, (_, rate) in links.items()}
    index = {name: ifindex for name, (ifindex, _) in links.items()}
    owner: dict[str, tuple[str, int]] = {}  # skb -> (device, length) of its last queueing
    for line in lines:
        m = _LINE.search(line)
        if m is None:
            continue
        t, kind, rest = float(m[1]), m[2], m[3]
        if kind == "net_dev_queue":
            q = _QUEUE.match(rest)
            if q is not None and q[1] in state:
                owner[q[2]] = (q[1], int(q[3]))
            continue
        if kind == "qdisc_enqueue":
            e = _ENQUEUE.search(rest)
            if e is None or (got := owner.get(e[2])) is None or index[got[0]] != int(e[1]):
                continue
            state[got[0]].queued += 1
            continue
        d = _DEQUEUE.search(rest)
        if d is None or (got := owner.pop(d[3], None)) is None or index[got[0]] != int(d[1]):
            continue
        link, packets = state[got[0]], int(d[2])
        if link.busy and link.last_t is not None:
            frame = WIRE_FRAME * 8 / link.rate_bps
            late = t - link.wire_free
            link.judged += 1
            link.late += late > frame
            link.lateness.append(late / frame)
        link.queued = max(0, link.queued - packets)
        link.sent += got[1] * packets
        link.first_t = t if link.first_t is None else link.first_t
        # a bulk dequeue names its first skb only: the others are taken to be as long
        link.wire_free = max(link.wire_free, t) + got[1] * packets * 8 / link.rate_bps
        link.last_t, link.busy = t, link.queued > 0
    return {name: Spacing(s.judged, s.late, _p99(s.lateness), s.sent, s.first_t, s.last_t)
            for name, s in state.items() if s.judged}


def _p99(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(math.ceil(0.99 * len(s))) - 1)]


def available() -> bool:
    """Can this process trace the events (root, tracefs, a kernel with them)?"""
    return os.geteuid() == 0 and _mount() and all(
        (TRACEFS / "events" / e).is_dir() for e in EVENTS)


def _mount() -> bool:
    if (TRACEFS / "instances").is_dir():
        return True
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)],
                       capture_output=True, timeout=10)
    return (TRACEFS / "instances").is_dir()


def _ifindexes(ifnames: list[str], netns: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for got in per_namespace(ifnames, netns, lambda _ipr, names: ifindexes(names)):
        out.update(got)
    return out


def _either(field: str, values, quote: bool) -> str:
    return " || ".join(f'{field} == "{v}"' if quote else f"{field} == {v}" for v in values)


class DepartureTracer:
    """Records the events for `rates` (device -> configured bps) into `path` between
    start() and stop(); stop() returns each device's Spacing and how many events the
    kernel lost (a buffer overrun: the figures then miss some packets)."""

    def __init__(self, rates: dict[str, float], path: Path,
                 netns: dict[str, str] | None = None) -> None:
        self.rates = rates
        self.path = path
        self.netns = netns or {}
        self.instance = TRACEFS / "instances" / f"{INSTANCE_PREFIX}{os.getpid()}-{id(self):x}"
        self._cat: subprocess.Popen | None = None
        self._index: dict[str, int] = {}

    def start(self) -> DepartureTracer:
        self._index = _ifindexes(list(self.rates), self.netns)
        if not _mount():  # a machine without systemd does not mount it at boot
            raise OSError(f"no tracefs at {TRACEFS}, and mounting it there failed: the "
                          "departure trace needs root and a kernel with tracefs")
        self.instance.mkdir()
        try:
            self._write("trace_clock", "mono")
            self._write("buffer_size_kb", str(BUFFER_KB))
            names = _either("name", self._index, quote=True)
            ifs = _either("ifindex", sorted(set(self._index.values())), quote=False)
            self._filter("net/net_dev_queue", names if len(names) < MAX_FILTER else "")
            self._filter("qdisc/qdisc_enqueue", ifs if len(ifs) < MAX_FILTER else "")
            self._filter("qdisc/qdisc_dequeue", f"packets > 0 && ({ifs})"
                         if len(ifs) < MAX_FILTER else "packets > 0")
            with self.path.open("wb") as out:  # dies with us, even by SIGKILL
                self._cat = subprocess.Popen(["cat", str(self.instance / "trace_pipe")],
                                             stdout=out, preexec_fn=_die_with_parent)
            for event in EVENTS:
                self._write(f"events/{event}/enable", "1")
        except BaseException:
            self._remove()
            raise
        return self

    def stop(self) -> tuple[dict[str, Spacing], int]:
        try:
            self._write("tracing_on", "0")
            lost = self._drain()
        finally:
            self._remove()
        links = {n: (i, self.rates[n]) for n, i in self._index.items()}
        with self.path.open(errors="replace") as f:
            return spacing(f, links), lost

    def _drain(self, timeout_s: float = 5.0) -> int:
        """Wait for `cat` to empty the buffers; return the events overwritten unread."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            stats = self._stats()
            if sum(s.get("entries", 0) for s in stats) == 0:
                break
            time.sleep(0.05)
        return sum(s.get("overrun", 0) for s in self._stats())

    def _stats(self) -> list[dict[str, int]]:
        out = []
        for cpu in (self.instance / "per_cpu").glob("cpu*"):
            with contextlib.suppress(OSError):
                doc = {}
                for line in (cpu / "stats").read_text().splitlines():
                    key, _, value = line.partition(":")
                    with contextlib.suppress(ValueError):
                        doc[key.strip()] = int(value.split()[0])
                out.append(doc)
        return out

    def _remove(self) -> None:
        if self._cat is not None:
            self._cat.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._cat.wait(timeout=5)
            self._cat = None
        remove_instance(self.instance)

    def _write(self, name: str, value: str) -> None:
        (self.instance / name).write_text(value)

    def _filter(self, event: str, expr: str) -> None:
        if expr:
            self._write(f"events/{event}/filter", expr)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def remove_instance(instance: Path, wait_s: float = 3.0) -> None:
    """Turn an instance's events off and remove it. The kernel refuses (EBUSY) while a
    reader holds its pipe open: a `cat` whose owner was just killed is signalled by the
    kernel, and gone within moments, so the removal is retried that long."""
    with contextlib.suppress(OSError):
        (instance / "tracing_on").write_text("0")
    for event in EVENTS:
        with contextlib.suppress(OSError):
            (instance / "events" / event / "enable").write_text("0")
    deadline = time.monotonic() + wait_s
    while instance.exists():
        try:
            instance.rmdir()
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.05)


def leftover_instances() -> list[Path]:
    """Instances of ours whose process is gone."""
    root = TRACEFS / "instances"
    if not root.is_dir():
        return []
    out = []
    for inst in root.glob(f"{INSTANCE_PREFIX}*"):
        pid = inst.name[len(INSTANCE_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            out.append(inst)
    return out
