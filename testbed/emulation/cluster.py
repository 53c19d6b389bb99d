"""One emulated fabric across several machines: Mininet's cluster edition.

The inventory's hosts are the servers (an inventory host named `localhost`, or with
`ansible_connection: local`, is this machine). Mininet places switches and hosts on
them (`switchbin`: switches in bins, each host with its ToR; `roundrobin`), runs remote
nodes through SSH (`ssh -o BatchMode=yes`: passwordless keys and passwordless sudo on
every server, the same user everywhere), and joins links that cross servers with a
tunnel: `ssh` (Mininet's RemoteLink: an Ethernet tunnel over SSH between tap devices;
needs PermitTunnel yes in the remote sshd) or `gre` (RemoteGRELink: gretap, needs the
kernel's ip_gre). Each node's HTB tree is built by this project's own tc code, run on
the node's server (`python -m testbed.datapath.tc` from `netkv_project_dir`, where the
playbooks put the project). The controller must listen where every server can reach
it: set emulation.bind to this machine's address on the servers' network.

Telemetry and the fidelity monitor read every server's switch counters through the
remote layer (remote.counters). `testbed emulate` runs its workers where their hosts
are: over SSH on other servers, each connecting to the router by TCP on emulation.bind
before it enters its host's namespace (so the control plane stays off the fabric).
"""

from __future__ import annotations

import ipaddress
import shlex
import socket
import subprocess
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from testbed.datapath import tc
from testbed.emulation.cleanup import TAG
from testbed.emulation.net import EmulatedNetwork, EmulationError
from testbed.emulation.processes import LocalLauncher
from testbed.remote.counters import cluster_counters
from testbed.remote.inventory import InventoryError, is_local, load_hostvars, load_inventory

PLACEMENTS = ("switchbin", "roundrobin")
TUNNELS = ("ssh", "gre")
# ssh's %C: a hash of this machine, the server, port and user (short enough for a socket)
CONTROL_PATH = "/tmp/netkv-mn-%C"


@dataclass(frozen=True)
class Servers:
    names: list[str]
    ips: dict[str, str]
    user: str | None
    project_dir: dict[str, str]
    inventory: Path | None = None


def servers_from_inventory(path: str | Path) -> Servers:
    """Cluster servers from an Ansible-style inventory (see testbed.remote.inventory)."""
    specs = load_inventory(path)
    hostvars = load_hostvars(path)
    names, ips, dirs, users = [], {}, {}, set()
    for name, spec in specs.items():
        local = is_local(name, hostvars[name])
        server = "localhost" if local else name
        names.append(server)
        ips[server] = "127.0.0.1" if local else spec.host
        dirs[server] = str(hostvars[name].get("netkv_project_dir", "/opt/netkv-testbed"))
        if not local and spec.user:
            users.add(spec.user)
    if len(users) > 1:
        raise InventoryError(f"{path}: the cluster edition uses one SSH user for every "
                             f"server; the inventory names {sorted(users)}")
    return Servers(names, ips, users.pop() if users else None, dirs, Path(path).resolve())


def _run_on(node, command: str, **_kwargs) -> str:
    """Run a shell command line on the node's server, root namespace, quoting intact."""
    from mininet.util import errRun

    if getattr(node, "isRemote", False):  # ssh joins its arguments: quote them once
        return node.rcmd(["sh", "-c", shlex.quote(command)])
    out, err, _ = errRun(["sh", "-c", command])
    return out + err


def _switch_class():
    """Mininet's RemoteOVSSwitch, but each server's batch of ovs-vsctl commands runs as a
    process (ssh for remote servers) instead of being typed into a node's shell: a
    fabric's batch is longer than a terminal line (4096 bytes) and hung there."""
    from itertools import groupby
    from operator import attrgetter

    from mininet.examples.cluster import RemoteOVSSwitch
    from mininet.node import OVSSwitch

    class BatchedRemoteOVSSwitch(RemoteOVSSwitch):
        @classmethod
        def batchStartup(cls, switches, **_kwargs):  # noqa: N802 - Mininet's name
            key = attrgetter("server")
            for _server, group in groupby(sorted(switches, key=key), key):
                group = tuple(group)
                OVSSwitch.batchStartup(group, run=partial(_run_on, group[0]))
            return switches

    return BatchedRemoteOVSSwitch


class ClusterNetwork(EmulatedNetwork):
    def __init__(self, scenario, scenario_file: Path, workdir: Path, servers: Servers,
                 placement: str = "switchbin", tunnel: str = "ssh", quiet: bool = True):
        super().__init__(scenario, scenario_file, workdir, quiet)
        if self.ovs_instances > 1:
            raise EmulationError("emulation.ovs_instances splits one machine's userspace "
                                 "datapath; a cluster run uses each server's own Open "
                                 "vSwitch (set ovs_instances: 1)")
        remote = [name for name in servers.names if name != "localhost"]
        if remote and ipaddress.ip_address(scenario.emulation.bind).is_loopback:
            raise EmulationError(
                f"emulation.bind is {scenario.emulation.bind}, which {', '.join(remote)} "
                "cannot reach: set it to this machine's address on the servers' network "
                "(the controller and the router listen there), with emulation.token")
        if placement not in PLACEMENTS or tunnel not in TUNNELS:
            raise EmulationError(f"placement must be one of {PLACEMENTS}, tunnel one of "
                                 f"{TUNNELS}")
        self.servers, self.placement, self.tunnel = servers, placement, tunnel
        if servers.inventory is not None:
            self.read_counters = cluster_counters(servers.inventory)

    def _controller_args(self) -> list[str]:
        inv = self.servers.inventory
        return ["--cluster", str(inv)] if inv is not None else []

    def control_address(self, tag: str) -> str:
        """TCP on emulation.bind, which every server reaches (a free port there)."""
        bind = self.scenario.emulation.bind
        with socket.socket() as s:
            s.bind((bind, 0))
            return f"tcp:{bind}:{s.getsockname()[1]}"

    def launcher(self):
        return ClusterLauncher(self)

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self.read_counters is not None:
                self.read_counters.close()

    def _start_mininet(self) -> None:
        from mininet.examples.cluster import (
            MininetCluster,
            RemoteGRELink,
            RemoteHost,
            RemoteLink,
            RoundRobinPlacer,
            SwitchBinPlacer,
        )
        from mininet.log import setLogLevel
        from mininet.node import RemoteController

        from testbed.topologies.mininet_topo import FatTreeTopo

        setLogLevel("warning" if self.quiet else "info")
        emu = self.scenario.emulation
        # every node's commands to a server share one SSH connection (Mininet's
        # controlPath): a new connection per command cost seconds in a slow VM
        shared = {"controlPath": CONTROL_PATH}
        kwargs = {"servers": self.servers.names, "serverIP": self.servers.ips,
                  "host": partial(RemoteHost, **shared),
                  "placement": SwitchBinPlacer if self.placement == "switchbin"
                  else RoundRobinPlacer}
        if self.servers.user:
            kwargs["user"] = self.servers.user
        self.net = MininetCluster(
            topo=FatTreeTopo(self.fabric), controller=None, autoSetMacs=False, build=False,
            switch=partial(_switch_class(), datapath=self.datapath, protocols="OpenFlow13",
                           **shared),
            link=RemoteGRELink if self.tunnel == "gre" else RemoteLink, **kwargs)
        self.net.addController(RemoteController("c0", ip=emu.bind, port=emu.of_port))
        self.net.build()
        self.net.start()
        for name in self.fabric.switches:  # tag on each switch's own server
            self.net.get(name).cmd("ovs-vsctl", "--timeout=10", "set", "Bridge", name,
                                   f"external_ids:{TAG}={self.run_id}")
        if self.datapath == "user":  # what TCULink does locally: no TX checksum offload
            for link in self.net.links:
                for intf in (link.intf1, link.intf2):
                    intf.node.cmd("ethtool", "-K", intf.name, "tx", "off", "rx", "off")

    def _shape(self) -> None:
        q = self.scenario.emulation.queue_min_packets
        bytes_ = self.scenario.emulation.queue_limit == "bytes"
        levels = self.scenario.kv_levels()
        # other servers: one tc run per host (its namespace) and one for all of a server's
        # switch ports (root namespace), through a node's shell there
        remote: dict[object, list[str]] = {}
        for node, intf, link in self.fabric.egress_interfaces():
            n = self.net.get(node)
            if (getattr(n, "server", "localhost") or "localhost") != "localhost":
                shell = n if node in self.fabric.hosts else next(
                    self.net.get(s) for s in self.fabric.switches
                    if getattr(self.net.get(s), "server", None) == n.server)
                remote.setdefault(shell, []).extend(
                    [intf, str(link.rate_bps), str(q), str(levels),
                     self.scenario.emulation.queue_limit])
            elif node in self.fabric.switches:
                tc.install_htb(intf, link.rate_bps, min_packets=q, kv_levels=levels,
                               byte_limit=bytes_)
            else:
                tc.install_htb(intf, link.rate_bps, netns=f"/proc/{n.pid}/ns/net",
                               min_packets=q, kv_levels=levels, byte_limit=bytes_)
        for shell, groups in remote.items():
            python = f"{self.servers.project_dir[shell.server]}/.venv/bin/python"
            for args in _lines_of(groups):
                out = shell.cmd(python, "-m", "testbed.datapath.tc", "install", *args, ";",
                                "echo", "rc=$?")
                if "rc=0" not in out:
                    raise EmulationError(f"{shell.name} on {shell.server}: HTB on "
                                         f"{', '.join(args[::5])} failed: {out[-400:]}")


def _lines_of(args: list[str], limit: int = 2000) -> list[list[str]]:
    """tc install's interface groups (five words each) cut into command lines a node's
    shell takes: a terminal line holds 4096 bytes, and a longer one hangs."""
    lines: list[list[str]] = [[]]
    for i in range(0, len(args), 5):
        group = args[i:i + 5]
        if lines[-1] and len(" ".join(lines[-1] + group)) > limit:
            lines.append([])
        lines[-1].extend(group)
    return lines


def cluster_network(inventory: str | Path, placement: str = "switchbin", tunnel: str = "ssh"):
    """What run_emulation builds each point's fabric with, spread over an inventory."""
    servers = servers_from_inventory(inventory)
    return lambda cell, cell_file, workdir, quiet=True: ClusterNetwork(
        cell, cell_file, workdir, servers, placement, tunnel, quiet=quiet)


def _ssh(node) -> list[str]:
    """Mininet's ssh command line to the node's server, without a terminal (-tt)."""
    return [arg for arg in node.sshcmd if arg != "-tt"]


class ClusterLauncher(LocalLauncher):
    """Workers where their hosts are. Each prefill/decode worker starts in its server's
    root namespace (over SSH on another server), connects to the router by TCP, then
    enters its host's namespace (--netns). A remote worker stops when its SSH session
    ends (--exit-on-eof): there is no parent-death signal across machines."""

    stdin = subprocess.PIPE  # held open: its end is a remote worker's signal to stop

    def __init__(self, network: ClusterNetwork):
        self.network = network

    def _remote_nodes(self) -> dict[str, object]:
        """One host per other server, to reach that server by."""
        out = {}
        for name in self.network.fabric.hosts:
            node = self.network.host(name)
            if getattr(node, "isRemote", False):
                out.setdefault(node.server, node)
        return out

    def prepare(self, files: list[Path]) -> None:
        """The run's worker config and scenario, at the same paths on every server."""
        for server, node in self._remote_nodes().items():
            for path in files:
                path = Path(path).resolve()
                script = (f"mkdir -p {shlex.quote(str(path.parent))} && umask 077 && "
                          f"cat > {shlex.quote(str(path))}")
                done = subprocess.run([*_ssh(node), "sudo", "sh", "-c", shlex.quote(script)],
                                      input=path.read_bytes(), capture_output=True, timeout=60)
                if done.returncode != 0:
                    raise EmulationError(f"cannot copy {path} to {server}: "
                                         f"{done.stderr.decode(errors='replace')[-300:]}")

    def command(self, instance: str | None, cmd: list[str]) -> list[str]:
        if instance is None:
            return cmd
        node = self.network.host(instance)
        args = [*cmd[1:], "--netns", f"/proc/{node.pid}/ns/net"]
        if not getattr(node, "isRemote", False):
            return [cmd[0], *args]
        folder = self.network.servers.project_dir[node.server]
        script = (f"cd {shlex.quote(folder)} && exec " +
                  shlex.join([f"{folder}/.venv/bin/python", *args, "--exit-on-eof"]))
        return [*_ssh(node), "sudo", "sh", "-c", shlex.quote(script)]
