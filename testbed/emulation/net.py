"""Bring the emulated fabric up and, on every path out, down again.

Order: preflight (root, Open vSwitch answering, ports free) -> manifest -> controller
process -> Mininet (hosts, OVS bridges, veths) -> tag bridges -> HTB trees on every
egress -> wait until every switch has its routes and telemetry has polled once.
`stop()` undoes all of it and is safe to call twice; it runs on normal exit, on
exceptions, on Ctrl-C and (through the CLI's handler) on SIGTERM. What a SIGKILL leaves
is found by `testbed clean` through the manifest and the bridge tags.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from testbed.datapath import tc
from testbed.emulation import child, cleanup
from testbed.emulation.child import die_with_parent
from testbed.emulation.cleanup import STATE_DIR, TAG
from testbed.emulation.hosts import host_gone
from testbed.emulation.ovs.private_daemons import OvsDaemon, OvsDaemonError
from testbed.emulation.ovs.switches import remote_controller, switch_class
from testbed.emulation.ovs.system_daemons import SystemOvsWatch
from testbed.model.tcp import WIRE_FRAME
from testbed.records import atomic_write
from testbed.topologies.fabric import Fabric
from testbed.topologies.placement import auto_daemons, interface_netns, private_daemons
from testbed.topologies.replica import leaf_packets, rto_min_ms
from testbed.topologies.traffic_classes import engine_ports

ARP_CHUNK = 20  # static ARP entries set per shell line (about 1.6 KB)
# beside the run's scenario: the one its controller and workers read once "auto" is a count
RESOLVED_SCENARIO = "scenario-resolved.yaml"
# a route's advmss is the frame less Ethernet (14), IPv4 (20) and TCP's fixed header (20);
# the timestamps option's 12 bytes come out of it, leaving frame - 66 of payload
ADVMSS_HEADERS = 54


class EmulationError(RuntimeError):
    """The emulation cannot start here; the message says why and what to do."""


def kernel_datapath_available() -> bool:
    return Path("/sys/module/openvswitch").exists()


def choose_datapath(preference: str) -> str:
    if preference == "auto":
        return "kernel" if kernel_datapath_available() else "user"
    if preference == "kernel" and not kernel_datapath_available():
        raise EmulationError("emulation.datapath is 'kernel' but this kernel has no "
                             "openvswitch module; use 'user' or 'auto'")
    return preference


def resolve_split(scenario, datapath: str, cores: int, one_machine: bool = True,
                  daemons: int | None = None):
    """(scenario, why): the scenario with emulation.ovs_instances "auto" made a count for
    a fabric with `cores` cores on `datapath` (placement.auto_daemons), or `daemons` where
    a fabric side by side was sized by its measured forwarding (lanes.lane_daemons); as
    given with why None."""
    emu = scenario.emulation
    if emu.ovs_instances != "auto":
        return scenario, None
    switches = scenario.cluster.spec().n_switches
    if daemons is not None and datapath == "user" and one_machine:
        n, why = daemons, (f"side by side on {cores} core{'s' if cores > 1 else ''}: "
                           f"{daemons} for the forwarding measured here")
    else:
        n, why = auto_daemons(cores, switches, datapath, one_machine)
    return scenario.model_copy(update={"emulation": emu.model_copy(
        update={"ovs_instances": n})}), why


def plan_split(scenario, cores: int | None = None, one_machine: bool = True,
               daemons: int | None = None):
    """(scenario, split) for a fabric on this machine: the datapath it will use, the
    scenario with an "auto" daemon count resolved (resolve_split), and the choice as a
    record: {"kind", "ovs_daemons", "why"}."""
    datapath = choose_datapath(scenario.emulation.datapath)
    resolved, why = resolve_split(scenario, datapath, cores or os.cpu_count() or 1,
                                  one_machine, daemons)
    return resolved, {"kind": datapath,
                      "ovs_daemons": max(1, private_daemons(resolved.emulation)),
                      "why": why or "emulation.ovs_instances as given"}


def describe_split(split: dict) -> str:
    """A plan_split record in words: `datapath user on 4 OVS daemons (why)`."""
    n = split["ovs_daemons"]
    return (f"datapath {split['kind']} on {n} OVS daemon{'s' if n > 1 else ''} "
            f"({split['why']})")


def write_resolved(scenario, workdir: Path) -> Path:
    """The scenario with its datapath split resolved, beside the fabric's logs."""
    path = workdir / RESOLVED_SCENARIO
    atomic_write(path, yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    return path


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "".join(log.read_text().splitlines(True)[-lines:])
    except OSError:
        return ""


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def fabric_unavailable() -> str | None:
    """Why this machine cannot build the emulated fabric (root, Mininet, Open vSwitch),
    or None when it can."""
    if os.geteuid() != 0:
        return "the emulation needs root (network namespaces, Open vSwitch, tc)"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return ("Mininet is not importable: install Debian's 'mininet' package "
                "(./run.sh setup does)")
    try:
        ovs = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True,
                             text=True)
    except FileNotFoundError:
        return "Open vSwitch is not installed (./run.sh setup installs it)"
    if ovs.returncode != 0:
        return ("Open vSwitch does not answer (ovs-vsctl show failed): start it with "
                "/usr/share/openvswitch/scripts/ovs-ctl start")
    return None


def preflight(scenario) -> None:
    reason = fabric_unavailable()
    if reason:
        raise EmulationError(reason)
    emu = scenario.emulation
    for label, port in (("of_port", emu.of_port), ("oracle_port", emu.oracle_port),
                        ("metrics_port", emu.metrics_port)):
        deadline = time.monotonic() + 5.0  # a previous controller may still be exiting
        while not _port_free(emu.bind, port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _port_free(emu.bind, port):
            raise EmulationError(f"emulation.{label} {port} on {emu.bind} is in use; another "
                                 "run may be up (testbed clean) or choose another port")
    left = cleanup.Leftovers() if cleanup.IN_LANE else cleanup.find_leftovers()
    if not left.empty:
        raise EmulationError(f"leftovers of an earlier run exist ({left.describe()}); "
                             "run `testbed clean` first")


def _http_json(url: str, timeout: float = 2.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def set_static_arp(net, hosts: dict) -> None:
    """Every host knows every other host's MAC from the start, as a proactive fabric's
    hosts would: the controller still answers ARP, but a fabric whose controller died
    keeps forwarding (its flows stay in the switches) instead of failing new connections
    with EHOSTUNREACH once a neighbour entry expires. `hosts`: Fabric.hosts."""
    for name in hosts:
        host = net.get(name)
        dev = host.defaultIntf().name
        entries = [f"ip neigh replace {h.ip} lladdr {h.mac} dev {dev} nud permanent"
                   for other, h in hosts.items() if other != name]
        # chunks on one shell line each: a host may be remote (cluster edition), so no
        # batch file, and a terminal line holds at most 4 KB
        for k in range(0, len(entries), ARP_CHUNK):
            out = host.cmd("; ".join(entries[k:k + ARP_CHUNK]))
            if out.strip():
                raise EmulationError(f"{name}: cannot set its static ARP entries: "
                                     f"{out.strip()}")


def tune_host_routes(net, hosts: dict, emu) -> None:
    """Every host route gets the replica's minimum RTO (replica.rto_min_ms: Linux's 200
    modelled ms unless emulation.rto_min_ms says, x time dilation in wall time), segment
    size (emulation.frame_bytes: advmss caps what peers send on it) and congestion
    control (emulation.tcp_congestion): a socket that picks none, as the Transfer
    Engine's and the background streams', takes the route's, not the machine's default
    (bbr on some), as ns-3 gives both."""
    options = [f"rto_min {max(1, round(emu.dilation.wall(rto_min_ms(emu))))}ms"]
    if emu.frame_bytes != WIRE_FRAME:
        options.append(f"advmss {emu.frame_bytes - ADVMSS_HEADERS}")
    if emu.tcp_congestion != "system":
        options.append(f"congctl {emu.tcp_congestion}")
    for name in hosts:
        host = net.get(name)
        for route in host.cmd("ip route show").splitlines():
            if route.strip():
                out = host.cmd(f"ip route change {route.strip()} {' '.join(options)}")
                if out.strip():
                    raise EmulationError(f"{name}: cannot set {' and '.join(options)} "
                                         f"on '{route}': {out}")


class EmulatedNetwork:
    hosts_here = True  # its hosts' shells are processes on this machine

    def __init__(self, scenario, scenario_file: Path, workdir: Path, quiet: bool = True,
                 cores: int | None = None, daemons: int | None = None):
        self.scenario = scenario
        self.scenario_file = Path(scenario_file)
        self.workdir = Path(workdir)
        self.fabric: Fabric = scenario.fabric()
        self.quiet = quiet
        self.net = None
        self.controller: subprocess.Popen | None = None
        self.run_id = f"{os.getpid()}-{int(time.time() * 1000)}"
        self.manifest = STATE_DIR / f"{self.run_id}.json"
        # "auto" becomes a count for `cores` (this machine's, or a side-by-side fabric's
        # share, or `daemons` sized for it); the controller and the workers read it from
        # the copy start() writes
        self.scenario, self.split = plan_split(scenario, cores, self.hosts_here, daemons)
        self.resolved = self.scenario is not scenario
        self.datapath = self.split["kind"]
        self.private = private_daemons(self.scenario.emulation)  # 0: the system's OVS
        if self.private and self.datapath != "user":
            raise EmulationError("private OVS daemons (emulation.ovs_instances > 1 or "
                                 "private_ovs) run the userspace datapath, but this run uses "
                                 f"the {self.datapath} datapath (set emulation.datapath: user)")
        self.daemons: list[OvsDaemon] = []
        self.system_ovs: SystemOvsWatch | None = None  # watched while the fabric uses it
        self._stopped = False
        self.applied: dict | None = None  # emulation/readback.applied_replica, read once
        # how telemetry reads switch-port counters: tc.all_counters' signature, or None
        # for this machine's (a fabric over several machines reads every server's)
        self.read_counters = None

    # -- helpers -----------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        emu = self.scenario.emulation
        return f"http://{emu.bind}:{emu.oracle_port}"

    @property
    def interface_netns(self) -> dict[str, str]:
        """Switch port -> namespace path, for ports outside the root namespace."""
        return interface_netns(self.fabric, self.private)

    def status(self) -> dict:
        return _http_json(f"{self.base_url}/status")

    def control_address(self, tag: str) -> str:
        """Where a run's router listens for its workers: a socket file on this machine."""
        return str(STATE_DIR / f"{self.run_id}-{tag}.sock")

    def launcher(self):
        """Starts a run's workers: each prefill/decode worker inside its host."""
        from testbed.emulation.processes import NamespaceLauncher

        return NamespaceLauncher(self)

    def _controller_args(self) -> list[str]:
        return [arg for daemon in self.daemons
                for arg in ("--openflow-socket", str(daemon.openflow_socket))]

    def oracle(self) -> dict:
        return _http_json(f"{self.base_url}/oracle")

    def lost(self) -> str | None:
        """Why this fabric can carry no more of a run (None while it can): an OVS daemon
        gone for good, or a host's network namespace gone with its interface."""
        for daemon in self.daemons:
            if why := daemon.died():  # nobody restarts a private daemon
                return f"the datapath died: {why}; its switches stopped forwarding"
        if self.system_ovs is not None and (why := self.system_ovs.died()):
            return f"the datapath died: {why}"
        for name in self.fabric.hosts if self.net is not None and self.hosts_here else ():
            host = self.net.get(name)
            if why := host_gone(name, host.pid, host.intfNames()):
                return why
        return None

    @property
    def restarts(self) -> list[str]:
        """Datapath restarts seen so far, a line each (the system's daemons only)."""
        return self.system_ovs.restarts if self.system_ovs is not None else []

    def _write_manifest(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        data = {"run_id": self.run_id, "pid": os.getpid(),
                "bridges": sorted(self.fabric.switches),
                "controller_pid": self.controller.pid if self.controller else None,
                "ovs_daemons": [{"netns": d.netns, "rundir": str(d.rundir)}
                                for d in self.daemons],
                "workdir": str(self.workdir)}
        tmp = self.manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.manifest)

    def _wait(self, what: str, check, timeout: float, progress=None) -> None:
        """Until check() is true; `timeout` seconds, counted again from every change of
        progress() (a slow machine, e.g. a VM under software emulation, brings a fabric
        up switch by switch: it is given up on when it stops moving, not when it is slow)."""
        deadline = time.monotonic() + timeout
        last_error, seen = None, None
        while time.monotonic() < deadline:
            if self.controller is not None and self.controller.poll() is not None:
                raise EmulationError(f"the controller exited while waiting for {what}; "
                                     f"see {self.workdir / 'controller.log'}:\n"
                                     + _tail(self.workdir / "controller.log"))
            try:
                if check():
                    return
                if progress is not None and (now := progress()) != seen:
                    seen, deadline = now, time.monotonic() + timeout
            except OSError as exc:
                last_error = exc
            time.sleep(0.2)
        raise EmulationError(f"timed out after {timeout:.0f} s "
                             f"{'without progress ' if progress else ''}waiting for {what}"
                             + (f" (last seen: {seen})" if seen is not None else "")
                             + (f" (last error: {last_error})" if last_error else "")
                             + f"; controller log: {self.workdir / 'controller.log'}")

    def _progress(self) -> str:
        st = self.status()
        return (f"{st['switches_connected']} of {st['switches_expected']} switches connected, "
                f"{st['switches_ready']} with their routes, {min(st['polls'], 1)} poll")

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> EmulatedNetwork:
        preflight(self.scenario)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.resolved:
            self.scenario_file = write_resolved(self.scenario, self.workdir)
        self._write_manifest()
        try:
            self._start_daemons()  # first: the controller polls their namespaces
            if not self.daemons:
                self.system_ovs = SystemOvsWatch()
            self._start_controller()
            self._start_mininet()
            self._shape()
            set_static_arp(self.net, self.fabric.hosts)
            tune_host_routes(self.net, self.fabric.hosts, self.scenario.emulation)
            self._wait("every switch to get its routes and a first telemetry poll",
                       lambda: self.status()["ready"], timeout=90, progress=self._progress)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_controller(self) -> None:
        log = (self.workdir / "controller.log").open("w")
        cmd = [sys.executable, "-m", "testbed", "controller", str(self.scenario_file),
               *self._controller_args()]
        self.controller = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL,
                                           preexec_fn=die_with_parent)
        self._write_manifest()
        self._wait("the controller's HTTP status", lambda: "ready" in self.status(), timeout=30)

    def _start_daemons(self) -> None:
        for k in range(self.private):
            self.daemons.append(OvsDaemon(k, STATE_DIR))
            self._write_manifest()  # before it exists: a SIGKILL mid-start leaves it named
            try:
                self.daemons[-1].start()
            except OvsDaemonError as exc:
                raise EmulationError(str(exc)) from None

    def _move_switch_ports(self) -> None:
        """Each switch's veth ends into its daemon's namespace, up (a move sets them down)."""
        where = self.interface_netns
        by_ns: dict[str, list[str]] = {}
        for name in self.fabric.switches:
            for intf in self.net.get(name).intfList():
                if intf.name != "lo":
                    by_ns.setdefault(where[intf.name], []).append(intf.name)
        with tc.netlink() as ipr:
            for path, names in by_ns.items():
                fd = os.open(path, os.O_RDONLY)
                try:
                    for name in names:
                        ipr.link("set", index=ipr.link_lookup(ifname=name)[0], net_ns_fd=fd)
                finally:
                    os.close(fd)
        for path, names in by_ns.items():
            tc.in_namespace(path, lambda ipr, names=names: [
                ipr.link("set", index=ipr.link_lookup(ifname=n)[0], state="up") for n in names])

    def _start_mininet(self) -> None:
        from mininet.link import Link, TCULink
        from mininet.log import setLogLevel
        from mininet.net import Mininet

        from testbed.topologies.mininet_topo import FatTreeTopo

        setLogLevel("warning" if self.quiet else "info")
        emu = self.scenario.emulation
        # userspace datapath: TCP over veth stalls unless checksum offload is off (TCULink)
        link = TCULink if self.datapath == "user" else Link
        switch = switch_class(self.datapath, self.daemons, self.fabric.switches)
        self.net = Mininet(topo=FatTreeTopo(self.fabric), switch=switch, link=link,
                           controller=None, autoSetMacs=False, build=False)
        self.net.addController(remote_controller("c0", emu.bind, emu.of_port))
        self.net.build()
        if self.daemons:
            self._move_switch_ports()
        self.net.start()
        if self.daemons:
            return  # nothing of ours in the system's OVS: the namespaces are the tag
        cmd = ["ovs-vsctl", "--timeout=10"]
        for name in self.fabric.switches:
            cmd += ["--", "set", "Bridge", name, f"external_ids:{TAG}={self.run_id}"]
        subprocess.run(cmd, check=True, capture_output=True)

    def _shape(self) -> None:
        emu = self.scenario.emulation
        bytes_ = emu.queue_limit == "bytes"
        levels = self.scenario.kv_levels()
        where = self.interface_netns
        engine = engine_ports(emu.kv_port) if emu.kv_transport == "mooncake" else ()
        for node, intf, link in self.fabric.egress_interfaces():
            switch = node in self.fabric.switches
            netns = where.get(intf) if switch else f"/proc/{self.net.get(node).pid}/ns/net"
            tc.install_htb(intf, link.rate_bps, netns=netns, packets=leaf_packets(link, emu),
                           kv_levels=levels, byte_limit=bytes_, frame_bytes=emu.frame_bytes,
                           kv_ports=() if switch else engine)

    def host(self, name: str):
        return self.net.get(name)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.net is not None:
                self._stop_mininet()
        finally:
            for daemon in self.daemons:
                daemon.stop()
            if self.controller is not None:
                child.stop(self.controller)
            left = cleanup.find_leftovers()
            # with our shells and workers that outlived the stop (a slow machine's can)
            ours = cleanup.Leftovers(
                bridges=[b for b in left.bridges if b in self.fabric.switches],
                interfaces=left.interfaces, processes=cleanup.own_processes(left.processes),
                manifests=[self.manifest] if self.manifest.exists() else [],
                namespaces=[d.netns for d in self.daemons if d.netns in left.namespaces])
            cleanup.remove(ours)

    def _stop_mininet(self, timeout: float = 30.0) -> None:
        """Mininet's stop, which must not hang a teardown.

        When a start is interrupted in the middle of a node command, Mininet's stop can
        block for ever reading that node's shell. After `timeout`, kill our node shells
        (that unblocks it) and let the targeted cleanup remove the rest.
        """
        def stop() -> None:
            # a host whose shell died took its namespace and veth with it; Mininet would
            # wait out `timeout` on that shell deleting a link that is already gone
            # (a host on another server may have no shell of ours to ask: its ssh)
            dead = {h for h in self.net.hosts if h.shell is None or h.shell.poll() is not None
                    } if self.hosts_here else set()
            self.net.links = [lk for lk in self.net.links
                              if lk.intf1.node not in dead and lk.intf2.node not in dead]
            self.net.hosts = [h for h in self.net.hosts if h not in dead]
            self.net.stop()
            # Mininet's RemoteController.stop does nothing: its node's shell and pty would
            # outlive every run of a process that builds many fabrics (the API, a soak)
            for controller in self.net.controllers:
                controller.terminate()

        worker = threading.Thread(target=stop, name="mininet-stop", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            cleanup.remove(cleanup.Leftovers(processes=cleanup.own_processes()))
            worker.join(10)

    def __enter__(self) -> EmulatedNetwork:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
