"""Per-thread CPU of the datapath and the workers, read from /proc.

Whole-machine busy time hides the emulation's real ceiling: Open vSwitch's userspace
datapath forwards every veth port (a non-PMD port) in ovs-vswitchd's main thread, so one
core can be pegged while the others idle and the machine's average looks fine. A thread
can use at most one core, so its busy share of one core is the signal: a datapath thread
near 100% cannot move packets any faster, whatever the rest of the machine does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
VSWITCHD = "ovs-vswitchd"


@dataclass(frozen=True)
class ThreadTimes:
    process: str  # a label: "ovs-vswitchd", or a worker's name
    tid: int
    comm: str  # the kernel's thread name (pmd-c02/id:9, handler3, ...)
    role: str  # main | pmd | handler | revalidator | other (datapath); worker (a process)
    ticks: int  # user + system CPU ticks so far
    waited_ns: int | None = None  # time runnable but waiting for a core (schedstat)
    runs: int | None = None  # times it was put on a core (schedstat's timeslices)


def parse_stat(text: str) -> tuple[str, int]:
    """(comm, utime + stime in ticks) from a /proc/<pid>/task/<tid>/stat line; comm may
    hold spaces and parentheses, so fields are counted from the last ')'."""
    head, _, tail = text.rpartition(")")
    comm = head.split("(", 1)[1]
    fields = tail.split()
    return comm, int(fields[11]) + int(fields[12])


def datapath_role(comm: str, is_main: bool) -> str:
    """What an ovs-vswitchd thread does, from its name (OVS names its threads)."""
    if is_main:
        return "main"
    for prefix in ("pmd", "handler", "revalidator"):
        if comm.startswith(prefix):
            return prefix
    return "other"


def vswitchd_pids(proc: Path = Path("/proc")) -> list[int]:
    pids = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == VSWITCHD:
                    pids.append(int(entry.name))
            except OSError:  # exited while we looked
                continue
    return sorted(pids)


def netns_of(pid: int, proc: Path = Path("/proc"), named: Path = Path("/run/netns")
             ) -> str | None:
    """The `ip netns` name of the process's network namespace, if it has one (a private
    OVS daemon's: which share of the fabric it forwards)."""
    try:
        mine = os.stat(proc / str(pid) / "ns" / "net").st_ino
        for entry in named.iterdir():
            if os.stat(entry).st_ino == mine:
                return entry.name
    except OSError:
        pass
    return None


def read_threads(processes: dict[str, int], proc: Path = Path("/proc")) -> list[ThreadTimes]:
    """Every thread of each ovs-vswitchd, and each worker as one whole process (a process
    gone meanwhile is skipped).

    A worker is read from /proc/<pid>/stat, which adds up all its threads, exited ones
    included: its KV pushes run in threads that live for one transfer, shorter than a
    sampling interval, so per thread they would never be seen; and Python's interpreter
    lock keeps the whole worker near one core anyway."""
    out = []
    for label, pid in processes.items():
        if not label.startswith(VSWITCHD):
            try:
                comm, ticks = parse_stat((proc / str(pid) / "stat").read_text())
            except (OSError, IndexError, ValueError):
                continue
            out.append(ThreadTimes(label, pid, comm, "worker", ticks))
            continue
        try:
            tids = [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
        except OSError:
            continue
        for tid in tids:
            task = proc / str(pid) / "task" / str(tid)
            try:
                comm, ticks = parse_stat((task / "stat").read_text())
            except (OSError, IndexError, ValueError):
                continue
            out.append(ThreadTimes(label, tid, comm, datapath_role(comm, tid == pid), ticks,
                                   *read_schedstat(task)))
    return out


def read_schedstat(task: Path) -> tuple[int | None, int | None]:
    """(ns the thread spent runnable on a run queue but not running, times it was put on
    a core): the second and third fields of schedstat (a kernel without CONFIG_SCHED_INFO
    has no such file: None, None). A datapath thread kept from a core delays packets
    before they reach any queue, where the departure test cannot see it; this shows it
    directly, whatever the machine's busy share. Their ratio is how long a packet that
    woke it waited, on average, before it was forwarded."""
    try:
        fields = (task / "schedstat").read_text().split()
        return int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None, None


def waited(prev: list[ThreadTimes], cur: list[ThreadTimes]) -> dict[tuple, tuple[float, int]]:
    """(process, comm, role, tid) -> (seconds it waited for a core, times it got one) over
    the interval (datapath threads only: a worker's pushes live in threads shorter than an
    interval, whose waits would be lost with them)."""
    waited_s = _per_interval(prev, cur, 1.0,
                             lambda t: None if t.waited_ns is None else t.waited_ns / 1e9)
    runs = _per_interval(prev, cur, 1.0, lambda t: t.runs)
    return {k: (w, int(runs[k])) for k, w in waited_s.items() if k in runs}


def waits(got: dict[tuple, tuple[float, int]], dt: float) -> dict[tuple, float]:
    """The same threads -> the share of the interval dt they waited for a core."""
    return {k: seconds / dt for k, (seconds, _) in got.items()} if dt > 0 else {}


def shares(prev: list[ThreadTimes], cur: list[ThreadTimes], dt: float) -> dict[tuple, float]:
    """(process, comm, role, tid) -> share of one core busy over the interval."""
    return _per_interval(prev, cur, dt, lambda t: t.ticks / TICKS_PER_S)


def _per_interval(prev: list[ThreadTimes], cur: list[ThreadTimes], dt: float,
                  seconds) -> dict[tuple, float]:
    """A cumulative per-thread time (`seconds(t)`, None where unknown) as its share of the
    interval dt, for the threads read both times."""
    before = {(t.process, t.tid): seconds(t) for t in prev}
    out = {}
    for t in cur:
        got, now = before.get((t.process, t.tid)), seconds(t)
        if got is not None and now is not None and dt > 0:
            out[(t.process, t.comm, t.role, t.tid)] = max(0.0, (now - got) / dt)
    return out


class ThreadSampler:
    """Samples the datapath's threads (every ovs-vswitchd on the machine) and those of
    the processes `workers()` names, interval by interval."""

    def __init__(self, workers=None, proc: Path = Path("/proc")):
        self.workers = workers or dict
        self.proc = proc
        self._prev: list[ThreadTimes] = []
        self.samples: list[dict[tuple, float]] = []
        self.waits: list[dict[tuple, float]] = []  # beside each sample
        self.waited: list[dict[tuple, tuple[float, int]]] = []  # and these

    def _processes(self) -> dict[str, int]:
        found = {}
        for k, pid in enumerate(vswitchd_pids(self.proc)):
            where = netns_of(pid, self.proc)
            found[f"{VSWITCHD}@{where}" if where else
                  VSWITCHD if k == 0 else f"{VSWITCHD}#{k}"] = pid
        found.update(self.workers())
        return found

    def sample(self, dt: float) -> dict[tuple, float]:
        cur = read_threads(self._processes(), self.proc)
        got = shares(self._prev, cur, dt) if self._prev else {}
        if got:
            self.samples.append(got)
            self.waited.append(waited(self._prev, cur))
            self.waits.append(waits(self.waited[-1], dt))
        self._prev = cur
        return got
