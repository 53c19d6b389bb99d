"""Find and remove what emulation runs leave behind: bridges, veths, processes, manifests,
the namespaces and state of private OVS daemons (emulation.ovs_instances > 1) and the
tracefs instances of the per-packet fidelity test whose run is gone.

Every run writes a manifest under STATE_DIR naming what it created and its controller's
pid, and tags its OVS bridges with external_ids:netkv-testbed=<run id>. Cleanup removes
exactly that, plus anything that matches the project's own naming (a run killed before
it wrote its manifest). Unlike Mininet's `mn -c` it leaves other bridges and files alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.datapath import departures
from testbed.emulation.ovs import private_daemons
from testbed.topologies.placement import LANE_NETNS_RE, LANE_OVS_NETNS_RE, NETNS_PREFIX

STATE_DIR = Path(os.environ.get("NETKV_STATE_DIR", "/run/netkv-testbed"))
TAG = "netkv-testbed"
NODE = r"(?:i\d+|tor\d+|agg\d+|core\d+)"
INTF_RE = re.compile(rf"^{NODE}-eth\d+$")
SHELL_RE = re.compile(rf"mininet:{NODE}$")
WORKER_RE = re.compile(r"-m testbed\.workers (?:router|loadgen|prefill|decode) "
                       r"|-m testbed\.emulation\.lane ")
NETNS_RE = re.compile(rf"^{re.escape(NETNS_PREFIX)}\d+$|{LANE_NETNS_RE.pattern}"
                      rf"|{LANE_OVS_NETNS_RE.pattern}")
# a fabric side by side with others (testbed.emulation.lanes) is started by a parent that
# checked for leftovers once: its siblings' processes are not leftovers
IN_LANE = bool(os.environ.get("NETKV_LANE"))


@dataclass
class Leftovers:
    bridges: list[str] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)
    manifests: list[Path] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    traces: list[Path] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.bridges or self.interfaces or self.processes or self.manifests
                    or self.namespaces or self.traces)

    def describe(self) -> str:
        if self.empty:
            return "nothing left behind"
        parts = []
        for label, items in (("bridges", self.bridges), ("interfaces", self.interfaces),
                             ("processes", self.processes), ("manifests", self.manifests),
                ("namespaces", self.namespaces), ("trace instances", self.traces)):
            if items:
                parts.append(f"{len(items)} {label}")
        return ", ".join(parts)


def _run(cmd: list[str], timeout: float = 10.0) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return ""


def tagged_bridges() -> list[str]:
    out = _run(["ovs-vsctl", "--timeout=5", "--format=json", "--columns=name,external_ids",
                "list", "Bridge"])
    if not out.strip():
        return []
    data = json.loads(out)
    names = []
    for name, ext in data["data"]:
        pairs = dict(ext[1]) if ext and ext[0] == "map" else {}
        if TAG in pairs:
            names.append(name)
    return names


def our_interfaces() -> list[str]:
    out = _run(["ip", "-o", "link", "show"])
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if INTF_RE.match(name):
                names.append(name)
    return names


def our_namespaces() -> list[str]:
    """Private OVS daemons' namespaces (`ip netns` keeps them under /run/netns)."""
    root = Path("/run/netns")
    return sorted(p.name for p in root.iterdir() if NETNS_RE.match(p.name)) \
        if root.is_dir() else []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def our_processes() -> list[int]:
    """Mininet node shells named like ours, worker processes, side-by-side fabrics,
    controllers in manifests, private OVS daemons (their files live under STATE_DIR/ovs<k>,
    or STATE_DIR/lane<j>/ovs<k> for a fabric side by side)."""
    daemon_dir = re.compile(rf"{re.escape(str(STATE_DIR))}/(?:lane\d+/)?ovs\d")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        cmdline = _cmdline(int(entry.name))  # empty for zombies: dead, nothing to remove
        if SHELL_RE.search(cmdline) or WORKER_RE.search(cmdline) or (
                cmdline.startswith(("ovsdb-server ", "ovs-vswitchd "))
                and daemon_dir.search(cmdline)):
            pids.append(int(entry.name))
    for manifest in manifests():
        pid = _manifest(manifest).get("controller_pid")
        if pid and "testbed" in _cmdline(pid) and "controller" in _cmdline(pid):
            pids.append(pid)
    return sorted(set(pids))


def own_processes(among: list[int] | None = None) -> list[int]:
    """Our processes (`among` those, or all of them) that are this process's descendants:
    its own fabric's, never a side-by-side sibling's."""
    if among == []:
        return []  # nothing to look for: no walk of /proc
    mine = descendants(os.getpid())
    return [p for p in (our_processes() if among is None else among) if p in mine]


def manifests() -> list[Path]:
    """Run manifests and the routers' control sockets (side-by-side fabrics' too)."""
    if not STATE_DIR.is_dir():
        return []
    return sorted(p for pattern in ("*.json", "*.sock", "lane*/*.json", "lane*/*.sock")
                  for p in STATE_DIR.glob(pattern))


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, their children, ...)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parent[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def _manifest(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def find_leftovers() -> Leftovers:
    bridges = set(tagged_bridges())
    listed = set(_run(["ovs-vsctl", "--timeout=5", "list-br"]).split())
    for manifest in manifests():
        bridges.update(b for b in _manifest(manifest).get("bridges", []) if b in listed)
    return Leftovers(sorted(bridges), our_interfaces(), our_processes(), manifests(),
                     our_namespaces(), departures.leftover_instances())


def remove(left: Leftovers) -> None:
    for pid in left.processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in left.processes):
        time.sleep(0.05)
    for pid in left.processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if left.bridges:
        cmd = ["ovs-vsctl", "--timeout=10"]
        for b in left.bridges:
            cmd += ["--", "--if-exists", "del-br", b]
        _run(cmd, timeout=20)
    for netns in left.namespaces:  # takes every veth end inside, and so its peer
        private_daemons.remove(netns, namespace_files(netns))
    for intf in our_interfaces():
        _run(["ip", "link", "del", intf])
    for manifest in left.manifests:
        manifest.unlink(missing_ok=True)
    # the processes just killed may have owned trace instances: look again, as for veths
    for instance in {*left.traces, *departures.leftover_instances()}:
        departures.remove_instance(instance)


def namespace_files(netns: str) -> Path:
    """The state a namespace of ours comes with: a private daemon's run directory, or a
    side-by-side fabric's whole state directory."""
    if (m := LANE_NETNS_RE.match(netns)) is not None:
        return STATE_DIR / f"lane{m[1]}"
    if (m := LANE_OVS_NETNS_RE.match(netns)) is not None and not netns.startswith(NETNS_PREFIX):
        return STATE_DIR / f"lane{m[1]}" / f"ovs{m[2]}"
    return private_daemons.rundir(STATE_DIR, int(netns[len(NETNS_PREFIX):]))


def clean() -> Leftovers:
    """Remove every leftover; return what was found."""
    left = find_leftovers()
    if not left.empty:
        remove(left)
    return left
