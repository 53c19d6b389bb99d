"""What the machine does to packets before any emulated queue sees them.

A veth hands every packet it sends to its peer through the kernel's per-CPU input
backlog, and the userspace datapath reads its ports from packet sockets, whose receive
buffers hold packets until ovs-vswitchd's one forwarding thread gets to them. A real
switch holds nothing there and drops nothing there; on a machine short of cycles both
can happen, and neither shows in a qdisc's counters, the backlog samples or the
departure trace, which see only what reached an egress queue. So this module reads
the backlog's drops (/proc/net/softnet_stat, machine-wide), the datapath's sockets'
drops and buffer sizes (`ss`, at a run's start and end) and what their buffers hold
(/proc/<pid>/net/packet, cheap enough for the backlog sampler's 100 Hz) beside the
bytes its ports took in (/proc/<pid>/net/dev), which turn what is held into a wait.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from array import array
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from testbed.datapath.tc import in_namespace

_INO = re.compile(r"\bino:(\d+)")
_SKMEM = re.compile(r"skmem:\(([^)]*)\)")
_OWNER = re.compile(r'\("([^"]+)",pid=(\d+)')


def softnet_drops(text: str) -> int:
    """Packets the input backlog dropped (full), summed over the CPUs: the second
    column of /proc/net/softnet_stat, in hex."""
    return sum(int(line.split()[1], 16) for line in text.splitlines() if line.strip())


def socket_memory(text: str) -> dict[int, tuple[int, int]]:
    """/proc/<pid>/net/packet -> socket inode -> (the interface it is bound to, 0 for
    none; the bytes its receive buffer holds: Rmem, the kernel's accounting, in which
    each packet counts its buffer's true size)."""
    out = {}
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 9:
            out[int(cols[8])] = (int(cols[4]), int(cols[6]))
    return out


def received_bytes(text: str, names: set[str]) -> int:
    """/proc/<pid>/net/dev -> the bytes the interfaces `names` received, summed."""
    total = 0
    for line in text.splitlines()[2:]:
        name, _, counters = line.partition(":")
        if name.strip() in names:
            total += int(counters.split()[0])
    return total


@dataclass(frozen=True)
class PacketSocket:
    inode: int
    pid: int
    drops: int  # packets the socket dropped: its receive buffer was full
    rcvbuf: int  # the receive buffer's size, bytes


def packet_sockets(text: str, owner: str) -> dict[int, PacketSocket]:
    """`ss -0 -a -n -e -m -p` -> the packet sockets that process `owner` holds."""
    out = {}
    for record in re.split(r"\n(?=\S)", text):
        ino, mem, who = _INO.search(record), _SKMEM.search(record), _OWNER.search(record)
        if not (ino and mem and who) or who.group(1) != owner:
            continue
        fields = dict(re.fullmatch(r"([a-z]+)(\d+)", f).groups() for f in mem.group(1).split(","))
        out[int(ino.group(1))] = PacketSocket(int(ino.group(1)), int(who.group(2)),
                                              int(fields.get("d", 0)), int(fields["rb"]))
    return out


def daemons_in(pids: list[int], namespaces: set[str], proc: Path = Path("/proc")) -> list[int]:
    """Those of `pids` whose network namespace is one of `namespaces` (paths such as
    /run/netns/NAME): a fabric's own datapath, not another fabric's side by side."""
    want = set()
    for ns in namespaces:
        try:
            want.add(os.stat(ns).st_ino)
        except OSError:
            continue  # gone: its daemons with it
    mine = []
    for pid in pids:
        try:
            if os.stat(proc / str(pid) / "ns" / "net").st_ino in want:
                mine.append(pid)
        except OSError:
            continue  # exited
    return mine


def names_of(indexes: set[int]) -> dict[int, str]:
    """Interface index -> name in the namespace this thread is in; gone ones left out."""
    out = {}
    for index in indexes:
        with suppress(OSError):
            out[index] = socket.if_indextoname(index)
    return out


def _port_names(pid: int, indexes: set[int]) -> dict[int, str]:
    """names_of in process `pid`'s network namespace."""
    return in_namespace(f"/proc/{pid}/ns/net", lambda _: names_of(indexes), rtnl=False)


def _ss(pid: int, owner: str) -> dict[int, PacketSocket]:
    """The packet sockets of `owner` in the network namespace of process `pid`."""
    got = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "ss", "-0", "-a", "-n",
                          "-e", "-m", "-p"], capture_output=True, text=True, timeout=10)
    if got.returncode != 0:
        raise OSError(f"ss: {got.stderr.strip() or got.returncode}")
    return packet_sockets(got.stdout, owner)


@dataclass
class IngressReader:
    """The datapath processes' packet sockets (none on the kernel datapath) and the
    machine's input backlog. `start()` and `stop()` read the drops; `read()` what the
    sockets' buffers hold now, `sample()` keeps it in `held` and `fullest`, with the
    bytes the sockets' ports had received by then (`intake`) and when (`at`)."""

    pids: list[int]  # the datapath's processes (ovs-vswitchd)
    owner: str = "ovs-vswitchd"
    proc: Path = Path("/proc")
    sockets: dict[int, PacketSocket] = field(default_factory=dict)
    # bytes the buffers held at each sample (8 bytes a sample), the fullest one's share
    held: array = field(default_factory=lambda: array("q"))
    intake: array = field(default_factory=lambda: array("q"))
    at: array = field(default_factory=lambda: array("d"))  # monotonic seconds
    fullest: float = 0.0
    _softnet: int = 0
    _readers: dict[int, set[int]] = field(default_factory=dict)  # pid -> its inodes
    _ports: dict[int, set[str]] = field(default_factory=dict)  # pid -> their interfaces

    def _all(self) -> dict[int, PacketSocket]:
        out, seen = {}, set()
        for pid in self.pids:
            try:
                ns = (self.proc / str(pid) / "ns" / "net").stat().st_ino
            except OSError:
                continue  # exited
            if ns not in seen:  # one look per namespace: ss lists all its sockets
                seen.add(ns)
                out.update(_ss(pid, self.owner))
        return out

    def start(self) -> IngressReader:
        self._softnet = softnet_drops((self.proc / "net" / "softnet_stat").read_text())
        found = self._all()
        for pid in {sock.pid for sock in found.values()}:
            # a port's socket is bound to its interface; an unbound one receives nothing
            memory = self._memory(pid)
            bound = {i for i, (ifindex, _) in memory.items() if ifindex}
            self._readers[pid] = {i for i, s in found.items() if s.pid == pid and i in bound}
            names = _port_names(pid, {memory[i][0] for i in self._readers[pid]})
            self._ports[pid] = set(names.values())
        self.sockets = {i: found[i] for inodes in self._readers.values() for i in inodes}
        return self

    def _memory(self, pid: int) -> dict[int, tuple[int, int]]:
        try:
            return socket_memory((self.proc / str(pid) / "net" / "packet").read_text())
        except OSError:
            return {}  # exited

    def read(self) -> tuple[int, float]:
        """(bytes the datapath's receive buffers hold in all, the fullest one's share
        of its buffer)."""
        total, fullest = 0, 0.0
        for pid, inodes in self._readers.items():
            held = self._memory(pid)
            for inode in inodes & held.keys():
                total += held[inode][1]
                fullest = max(fullest, held[inode][1] / max(1, self.sockets[inode].rcvbuf))
        return total, fullest

    def received(self) -> int:
        """Bytes the datapath's ports have received so far (a counter)."""
        total = 0
        for pid, names in self._ports.items():
            try:
                total += received_bytes((self.proc / str(pid) / "net" / "dev").read_text(),
                                        names)
            except OSError:
                continue  # exited
        return total

    def sample(self) -> None:
        total, full = self.read()
        self.intake.append(self.received())
        self.at.append(time.monotonic())
        self.held.append(total)
        self.fullest = max(self.fullest, full)

    def stop(self) -> dict:
        """Drops since start: the input backlog's (machine-wide) and the datapath's
        sockets' (those open at both ends of the run); how many sockets were read, and
        how many of their ports' intake."""
        softnet = softnet_drops((self.proc / "net" / "softnet_stat").read_text())
        now = self._all()
        sockets = sum(now[i].drops - s.drops for i, s in self.sockets.items() if i in now)
        return {"backlog_drops": softnet - self._softnet, "socket_drops": sockets,
                "sockets": len(self.sockets),
                "ports": sum(len(names) for names in self._ports.values())}
