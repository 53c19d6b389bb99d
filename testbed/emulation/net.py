"""Bring the emulated fabric up and, on every path out, down again.

Order: preflight (root, Open vSwitch answering, ports free) -> manifest -> controller
process -> Mininet (hosts, OVS bridges, veths) -> tag bridges -> HTB trees on every
egress -> wait until every switch has its routes and telemetry has polled once.
`stop()` undoes all of it and is safe to call twice; it runs on normal exit, on
exceptions, on Ctrl-C and (through the CLI's handler) on SIGTERM. What a SIGKILL leaves
is found by `testbed clean` through the manifest and the bridge tags.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from functools import partial
from pathlib import Path

from testbed.datapath import tc
from testbed.emulation import cleanup
from testbed.emulation.cleanup import STATE_DIR, TAG
from testbed.topologies.fabric import Fabric


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


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def preflight(scenario) -> None:
    if os.geteuid() != 0:
        raise EmulationError("the emulation needs root (network namespaces, Open vSwitch, tc)")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        raise EmulationError("Mininet is not importable: install Debian's 'mininet' package "
                             "(./run.sh setup does)") from None
    ovs = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True)
    if ovs.returncode != 0:
        raise EmulationError("Open vSwitch does not answer (ovs-vsctl show failed): start it "
                             "with /usr/share/openvswitch/scripts/ovs-ctl start")
    emu = scenario.emulation
    for label, port in (("of_port", emu.of_port), ("oracle_port", emu.oracle_port),
                        ("metrics_port", emu.metrics_port)):
        deadline = time.monotonic() + 5.0  # a previous controller may still be exiting
        while not _port_free(emu.bind, port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not _port_free(emu.bind, port):
            raise EmulationError(f"emulation.{label} {port} on {emu.bind} is in use; another "
                                 "run may be up (testbed clean) or choose another port")
    left = cleanup.find_leftovers()
    if not left.empty:
        raise EmulationError(f"leftovers of an earlier run exist ({left.describe()}); "
                             "run `testbed clean` first")


def _die_with_parent() -> None:
    """Child side: get SIGTERM when the orchestrator dies, even by SIGKILL."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setsid()


def _http_json(url: str, timeout: float = 2.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


class EmulatedNetwork:
    def __init__(self, scenario, scenario_file: Path, workdir: Path, quiet: bool = True):
        self.scenario = scenario
        self.scenario_file = Path(scenario_file)
        self.workdir = Path(workdir)
        self.fabric: Fabric = scenario.fabric()
        self.quiet = quiet
        self.net = None
        self.controller: subprocess.Popen | None = None
        self.run_id = f"{os.getpid()}-{int(time.time() * 1000)}"
        self.manifest = STATE_DIR / f"{self.run_id}.json"
        self.datapath = choose_datapath(scenario.emulation.datapath)
        self._stopped = False

    # -- helpers -----------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        emu = self.scenario.emulation
        return f"http://{emu.bind}:{emu.oracle_port}"

    def status(self) -> dict:
        return _http_json(f"{self.base_url}/status")

    def oracle(self) -> dict:
        return _http_json(f"{self.base_url}/oracle")

    def _write_manifest(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        data = {"run_id": self.run_id, "pid": os.getpid(),
                "bridges": sorted(self.fabric.switches),
                "controller_pid": self.controller.pid if self.controller else None,
                "workdir": str(self.workdir)}
        tmp = self.manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.manifest)

    def _wait(self, what: str, check, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            if self.controller is not None and self.controller.poll() is not None:
                raise EmulationError(f"the controller exited while waiting for {what}; "
                                     f"see {self.workdir / 'controller.log'}:\n"
                                     + self._controller_tail())
            try:
                if check():
                    return
            except OSError as exc:
                last_error = exc
            time.sleep(0.2)
        raise EmulationError(f"timed out after {timeout:.0f} s waiting for {what}"
                             + (f" (last error: {last_error})" if last_error else "")
                             + f"; controller log: {self.workdir / 'controller.log'}")

    def _controller_tail(self) -> str:
        try:
            return "".join((self.workdir / "controller.log").read_text().splitlines(True)[-15:])
        except OSError:
            return ""

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> EmulatedNetwork:
        preflight(self.scenario)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_manifest()
        try:
            self._start_controller()
            self._start_mininet()
            self._shape()
            self._tune_hosts()
            self._wait("every switch to get its routes and a first telemetry poll",
                       lambda: self.status()["ready"], timeout=90)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_controller(self) -> None:
        log = (self.workdir / "controller.log").open("w")
        cmd = [sys.executable, "-m", "testbed", "controller", str(self.scenario_file)]
        self.controller = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL,
                                           preexec_fn=_die_with_parent)
        self._write_manifest()
        self._wait("the controller's HTTP status", lambda: "ready" in self.status(), timeout=30)

    def _start_mininet(self) -> None:
        from mininet.link import Link, TCULink
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch, RemoteController

        from testbed.topologies.mininet_topo import FatTreeTopo

        setLogLevel("warning" if self.quiet else "info")
        emu = self.scenario.emulation
        # userspace datapath: TCP over veth stalls unless checksum offload is off (TCULink)
        link = TCULink if self.datapath == "user" else Link
        switch = partial(OVSSwitch, datapath=self.datapath, protocols="OpenFlow13")
        self.net = Mininet(topo=FatTreeTopo(self.fabric), switch=switch, link=link,
                           controller=None, autoSetMacs=False, build=False)
        self.net.addController(RemoteController("c0", ip=emu.bind, port=emu.of_port))
        self.net.build()
        self.net.start()
        cmd = ["ovs-vsctl", "--timeout=10"]
        for name in self.fabric.switches:
            cmd += ["--", "set", "Bridge", name, f"external_ids:{TAG}={self.run_id}"]
        subprocess.run(cmd, check=True, capture_output=True)

    def _shape(self) -> None:
        q = self.scenario.emulation.queue_min_packets
        bytes_ = self.scenario.emulation.queue_limit == "bytes"
        levels = self.scenario.kv_levels()
        for node, intf, link in self.fabric.egress_interfaces():
            if node in self.fabric.switches:
                tc.install_htb(intf, link.rate_bps, min_packets=q, kv_levels=levels,
                               byte_limit=bytes_)
            else:
                host = self.net.get(node)
                tc.install_htb(intf, link.rate_bps, netns=f"/proc/{host.pid}/ns/net",
                               min_packets=q, kv_levels=levels, byte_limit=bytes_)

    def _tune_hosts(self) -> None:
        """Every host route gets the replica's minimum RTO (emulation.rto_min_ms)."""
        emu = self.scenario.emulation
        if emu.rto_min_ms is None:
            return
        wall_ms = max(1, round(emu.rto_min_ms * emu.time_dilation))
        for name in self.fabric.hosts:
            host = self.net.get(name)
            for route in host.cmd("ip route show").splitlines():
                if route.strip():
                    out = host.cmd(f"ip route change {route.strip()} rto_min {wall_ms}ms")
                    if out.strip():
                        raise EmulationError(f"{name}: cannot set rto_min on '{route}': {out}")

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
            if self.controller is not None and self.controller.poll() is None:
                self.controller.terminate()
                try:
                    self.controller.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.controller.kill()
                    self.controller.wait(timeout=5)
            left = cleanup.find_leftovers()
            ours = cleanup.Leftovers(
                bridges=[b for b in left.bridges if b in self.fabric.switches],
                interfaces=left.interfaces, processes=[],
                manifests=[self.manifest] if self.manifest.exists() else [])
            cleanup.remove(ours)

    def _stop_mininet(self, timeout: float = 30.0) -> None:
        """Mininet's stop, which must not hang a teardown.

        When a start is interrupted in the middle of a node command, Mininet's stop can
        block for ever reading that node's shell. After `timeout`, kill our node shells
        (that unblocks it) and let the targeted cleanup remove the rest.
        """
        worker = threading.Thread(target=self.net.stop, name="mininet-stop", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            cleanup.remove(cleanup.Leftovers(processes=cleanup.our_processes()))
            worker.join(10)

    def __enter__(self) -> EmulatedNetwork:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
