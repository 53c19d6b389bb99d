"""Private Open vSwitch daemons, one network namespace each, for a fabric split over cores.

One daemon = one ovsdb-server (its own database and socket under STATE_DIR) and one
ovs-vswitchd started inside namespace netkv-ovs<k> (testbed.topologies.placement). Both are
children of the orchestrator that die with it; `stop` ends them and deletes the
namespace, which destroys every veth end moved into it (and so its peer). The system's
Open vSwitch is left alone. What a SIGKILL leaves (a namespace, a state directory) is
found by `testbed clean` by name.

A switch's ovs-vsctl and ovs-ofctl reach its daemon through OVS_RUNDIR (their default
database socket and bridge management sockets live there); OpenFlow reaches the
controller through a unix socket in the daemon's run directory, because the namespace's
loopback is not the root's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path

from testbed.emulation import child
from testbed.emulation.child import die_with_parent
from testbed.topologies.placement import netns_name


class OvsDaemonError(RuntimeError):
    """A private Open vSwitch daemon did not start; the message names it and its log."""


def _run(cmd: list[str], what: str, timeout: float = 15.0, env: dict | None = None) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise OvsDaemonError(f"{what}: {cmd[0]} is not installed (Debian's openvswitch-switch "
                             "and iproute2; ./run.sh setup installs them)") from None
    except subprocess.TimeoutExpired:
        raise OvsDaemonError(f"{what}: `{' '.join(cmd)}` did not finish in {timeout:.0f} s"
                             ) from None
    if done.returncode != 0:
        raise OvsDaemonError(f"{what}: `{' '.join(cmd)}` failed: {done.stderr.strip()}")
    return done.stdout


class OvsDaemon:
    def __init__(self, index: int, state_dir: Path):
        self.index = index
        self.netns = netns_name(index)
        self.rundir = rundir(state_dir, index)
        self.procs: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        """Environment in which ovs-vsctl / ovs-ofctl / ovs-appctl talk to this daemon."""
        return {**os.environ, "OVS_RUNDIR": str(self.rundir), "OVS_DBDIR": str(self.rundir),
                "OVS_LOGDIR": str(self.rundir)}

    @property
    def db_socket(self) -> Path:
        return self.rundir / "db.sock"

    @property
    def openflow_socket(self) -> Path:
        """Where the controller listens for this daemon's switches (ovs-vswitchd dials unix
        sockets only inside its run directory)."""
        return self.rundir / "openflow.sock"

    def vsctl(self, *args: str) -> str:
        return _run(["ovs-vsctl", "--timeout=10", *args], f"ovs daemon {self.index}",
                    env=self.env)

    def start(self) -> OvsDaemon:
        what = f"ovs daemon {self.index}"
        self.rundir.mkdir(parents=True, exist_ok=True)
        _run(["ip", "netns", "add", self.netns], what)
        _run(["ip", "-n", self.netns, "link", "set", "lo", "up"], what)
        db = self.rundir / "conf.db"
        _run(["ovsdb-tool", "create", str(db), "/usr/share/openvswitch/vswitch.ovsschema"], what)
        self._spawn(["ovsdb-server", str(db), f"--remote=punix:{self.db_socket}",
                     "--no-chdir", f"--log-file={self.rundir / 'ovsdb-server.log'}",
                     "-vconsole:off", f"--pidfile={self.rundir / 'ovsdb-server.pid'}"])
        self._wait(what + "'s database socket", self.db_socket.exists)
        self.vsctl("--no-wait", "init")
        self._spawn(["ip", "netns", "exec", self.netns, "ovs-vswitchd",
                     f"unix:{self.db_socket}", "--no-chdir", "-vconsole:off",
                     f"--log-file={self.rundir / 'ovs-vswitchd.log'}",
                     f"--pidfile={self.rundir / 'ovs-vswitchd.pid'}"])
        self._wait(what + "'s ovs-vswitchd", self._vswitchd_up)
        return self

    def died(self) -> str | None:
        """Which of its processes exited, and how (None while both run): nobody restarts a
        private daemon, so its switches stop forwarding for good."""
        for name, proc in zip(("ovsdb-server", "ovs-vswitchd"), self.procs, strict=False):
            code = proc.poll()
            if code is not None:
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
                return (f"{name} of OVS daemon {self.index} ({how}); its log: "
                        f"{self.rundir / (name + '.log')}")
        return None

    def _spawn(self, cmd: list[str]) -> None:
        log = (self.rundir / f"{Path(cmd[0]).name}-{len(self.procs)}.out").open("w")
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env,
                                           preexec_fn=_as_datapath))

    def _vswitchd_up(self) -> bool:
        return bool(list(self.rundir.glob("ovs-vswitchd.*.ctl")))

    def _wait(self, what: str, ready, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise OvsDaemonError(f"{what} exited ({proc.returncode}); see logs in "
                                         f"{self.rundir}")
            if ready():
                return
            time.sleep(0.05)
        raise OvsDaemonError(f"timed out after {timeout:.0f} s waiting for {what}; logs in "
                             f"{self.rundir}")

    def stop(self) -> None:
        """Safe to call twice and after a failed start."""
        for proc in reversed(self.procs):  # ovs-vswitchd before its database
            child.stop(proc)
        self.procs.clear()
        remove(self.netns, self.rundir)


# ovs-ctl starts the system's daemons at nice -10 (its --ovs-vswitchd-priority default) so
# forwarding keeps up when the machine is busy; at nice 0 the private daemons' main thread
# queues behind any busy process and TCP through them loses ~20% of a shaped rate.
DAEMON_NICE = -10


def _as_datapath() -> None:
    die_with_parent()
    with suppress(PermissionError):
        os.nice(DAEMON_NICE)


def rundir(state_dir: Path, index: int) -> Path:
    return Path(state_dir) / f"ovs{index}"


def remove(netns: str, files: Path) -> None:
    """Delete a daemon's namespace (and with it every veth end inside) and its files."""
    if Path(f"/run/netns/{netns}").exists():
        with suppress(subprocess.TimeoutExpired):
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)
    shutil.rmtree(files, ignore_errors=True)
