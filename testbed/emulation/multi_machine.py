"""One emulated fabric across several machines: Mininet's cluster edition.

The inventory's hosts are the servers (an inventory host named `localhost`, or with
`ansible_connection: local`, is this machine). Mininet places switches and hosts on
them (`pod`: each pod whole on one server, the core switches dealt out, so only
aggregation-core links cross servers; Mininet's `switchbin`: switches in bins in name
order, each host with its ToR; `roundrobin`), runs remote
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
from testbed.emulation.ovs.switches import remote_controller
from testbed.emulation.processes import LocalLauncher
from testbed.model.tcp import WIRE_FRAME
from testbed.remote.counters import cluster_counters
from testbed.remote.inventory import (
    InventoryError,
    is_local,
    load_hostvars,
    load_inventory,
    project_dir,
)
from testbed.topologies.replica import leaf_packets
from testbed.topologies.traffic_classes import engine_ports

PLACEMENTS = ("pod", "switchbin", "roundrobin")
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
        dirs[server] = project_dir(hostvars[name])
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


def _pod_placer(spec):
    """A Mininet Placer for a fat-tree: pod k (its hosts, ToRs and aggregation switches) on
    server k mod n, core switch c on server c mod n. Every link inside a pod stays on one
    server, and only aggregation-core links become tunnels; a worker runs where its host
    is, so the workers are spread as the pods are. (Mininet's switchbin fills bins in
    name order, which put every ToR, and so every host and worker, on the last server.)"""
    from mininet.examples.cluster import Placer

    cores = spec.switches["core"]

    class PodPlacer(Placer):
        def place(self, node):
            pod = spec.pod_of.get(node)
            k = pod if pod is not None else cores.index(node)
            return self.servers[k % len(self.servers)]

    return PodPlacer


def _run_in_root_namespace(node, command: str) -> str:
    """A shell command line in the root namespace of the node's server: for a node on
    another server, typed into its shell (already connected) through nsenter."""
    if getattr(node, "isRemote", False):
        return node.cmd("nsenter", "--net=/proc/1/ns/net", "sh", "-c", shlex.quote(command))
    return _run_on(node, command)


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


def _gre_link_class():
    """Mininet's RemoteGRELink, but each end of a tunnel is made by one command line
    (add the gretap, set its address, MTU and state, move it into the node) typed into
    its node's shell, in the server's root namespace (nsenter), instead of five or six
    new SSH sessions (rcmd): on another server each of those cost 4-7 s in a VM under
    software emulation, most of a two-server fabric's start."""
    from mininet.examples.cluster import RemoteGRELink

    class BatchedGRELink(RemoteGRELink):
        def makeTunnel(self, node1, node2, intfname1, intfname2,  # noqa: N802 - Mininet's
                       addr1=None, addr2=None):
            assert node1.server != node2.server
            if node2.server == "localhost":  # this machine's address names the tunnel
                node1, node2 = node2, node1
                intfname1, intfname2, addr1, addr2 = intfname2, intfname1, addr2, addr1
            ip1, ip2 = node1.serverIP, node2.serverIP
            if node1.server == "localhost":
                from mininet.util import quietRun

                ip1 = quietRun(f"ip route get {ip2}").split(" src ")[1].split()[0]
            RemoteGRELink.GRE_KEY += 1
            for node, name, addr, local, remote in ((node1, intfname1, addr1, ip1, ip2),
                                                    (node2, intfname2, addr2, ip2, ip1)):
                steps = [f"ip link delete {name} 2>/dev/null; "
                         f"ip link add name {name} type gretap local {local} "
                         f"remote {remote} ttl 64 key {RemoteGRELink.GRE_KEY}",
                         *([f"ip link set {name} address {addr}"] if addr else []),
                         f"ip link set dev {name} up", f"ip link set dev {name} mtu 1450",
                         f"ip link set {name} netns {node.pid}"]
                out = _run_in_root_namespace(node, " && ".join(steps) + " && echo tunnel-ok")
                if "tunnel-ok" not in out:
                    raise EmulationError(f"cannot make the GRE tunnel end {name} on "
                                         f"{node.server} for {node.name}: {out[-300:]}")

    return BatchedGRELink


class ClusterNetwork(EmulatedNetwork):
    hosts_here = False  # their pids are other servers'

    def __init__(self, scenario, scenario_file: Path, workdir: Path, servers: Servers,
                 placement: str = "pod", tunnel: str = "ssh", quiet: bool = True):
        super().__init__(scenario, scenario_file, workdir, quiet)
        if self.private:
            raise EmulationError("emulation.ovs_instances > 1 and private_ovs split one "
                                 "machine's userspace datapath; a cluster run uses each "
                                 "server's own Open vSwitch (set ovs_instances: 1, "
                                 "private_ovs: false)")
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
            RemoteHost,
            RemoteLink,
            RoundRobinPlacer,
            SwitchBinPlacer,
        )
        from mininet.log import setLogLevel

        from testbed.topologies.mininet_topo import FatTreeTopo

        setLogLevel("warning" if self.quiet else "info")
        emu = self.scenario.emulation
        # every node's commands to a server share one SSH connection (Mininet's
        # controlPath): a new connection per command cost seconds in a slow VM
        shared = {"controlPath": CONTROL_PATH}
        kwargs = {"servers": self.servers.names, "serverIP": self.servers.ips,
                  "host": partial(RemoteHost, **shared),
                  "placement": {"pod": _pod_placer(self.fabric.spec),
                                "switchbin": SwitchBinPlacer,
                                "roundrobin": RoundRobinPlacer}[self.placement]}
        if self.servers.user:
            kwargs["user"] = self.servers.user
        self.net = MininetCluster(
            topo=FatTreeTopo(self.fabric), controller=None, autoSetMacs=False, build=False,
            switch=partial(_switch_class(), datapath=self.datapath, protocols="OpenFlow13",
                           **shared),
            link=_gre_link_class() if self.tunnel == "gre" else RemoteLink, **kwargs)
        self.net.addController(remote_controller("c0", emu.bind, emu.of_port))
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
        emu = self.scenario.emulation
        limit = self.scenario.emulation.queue_limit
        frame = self.scenario.emulation.frame_bytes
        levels = self.scenario.kv_levels()
        engine = engine_ports(emu.kv_port) if emu.kv_transport == "mooncake" else ()
        # another server's switch ports and hosts: one tc run there for all of them (each
        # interface in its node's namespace), through a node's shell on that server
        remote: dict[str, list[list[str]]] = {}
        shells: dict[str, object] = {}
        for node, intf, link in self.fabric.egress_interfaces():
            n = self.net.get(node)
            q = leaf_packets(link, emu)
            server = getattr(n, "server", None) or "localhost"
            if server != "localhost":
                shells.setdefault(server, n)
                ports = () if node in self.fabric.switches else engine
                remote.setdefault(server, []).append(
                    ["--netns", f"/proc/{n.pid}/ns/net", "--kv-ports", tc.port_range(ports),
                     intf, str(link.rate_bps), str(q), str(levels),
                     limit if frame == WIRE_FRAME else f"{limit}@{frame}"])
            elif node in self.fabric.switches:
                tc.install_htb(intf, link.rate_bps, packets=q, kv_levels=levels,
                               byte_limit=limit == "bytes", frame_bytes=frame)
            else:
                tc.install_htb(intf, link.rate_bps, netns=f"/proc/{n.pid}/ns/net",
                               packets=q, kv_levels=levels, byte_limit=limit == "bytes",
                               frame_bytes=frame, kv_ports=engine)
        for server, groups in remote.items():
            python = f"{self.servers.project_dir[server]}/.venv/bin/python"
            for args in _lines_of(groups):
                out = shells[server].cmd(python, "-m", "testbed.datapath.tc", "install",
                                         *args, ";", "echo", "rc=$?")
                if "rc=0" not in out:
                    raise EmulationError(f"{server}: HTB on {', '.join(args[4::9])} "
                                         f"failed: {out[-400:]}")


def _lines_of(groups: list[list[str]], limit: int = 2000) -> list[list[str]]:
    """tc install's interface groups cut into command lines a node's shell takes: a
    terminal line holds 4096 bytes, and a longer one hangs."""
    lines: list[list[str]] = [[]]
    for group in groups:
        if lines[-1] and len(" ".join(lines[-1] + group)) > limit:
            lines.append([])
        lines[-1].extend(group)
    return lines


def cluster_network(inventory: str | Path, placement: str = "pod", tunnel: str = "ssh"):
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
