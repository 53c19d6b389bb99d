"""Watch the system's Open vSwitch daemons while a fabric runs on them.

Neither daemon is ours, so a run cannot restart one; it can only notice. Their `--monitor`
parent (how `ovs-ctl start` runs them) restarts a daemon that crashed (SIGSEGV, SIGABRT,
...), and the controller re-installs the switches' flows when they reconnect: the run goes
on and its records name the restart. A daemon that was killed (SIGKILL, SIGTERM) or runs
without a monitor stays down: ovs-vswitchd gone forwards nothing, and with ovsdb-server
gone ovs-vswitchd spins on its lost connection; either way the run cannot finish, so it
stops naming the daemon instead of waiting out its drain limit.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

DAEMONS = ("ovsdb-server", "ovs-vswitchd")
RESTART_GRACE_S = 10.0  # the monitor restarts a crash at once (a second one within 10 s)
RESTART_HINT = ("start Open vSwitch again (/usr/share/openvswitch/scripts/ovs-ctl start, or "
                "systemctl restart openvswitch-switch), then run `testbed clean`")


def rundir() -> Path:
    return Path(os.environ.get("OVS_RUNDIR", "/var/run/openvswitch"))


def _pid(name: str) -> int | None:
    """The daemon's pid from its pidfile, when that process is alive."""
    try:
        pid = int((rundir() / f"{name}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() and _is(pid, name) else None


def _is(pid: int, name: str) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(
            name.encode())
    except OSError:
        return False


class SystemOvsWatch:
    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.pids = {name: _pid(name) for name in DAEMONS}
        self.down_since: dict[str, float] = {}
        self.restarts: list[str] = []  # one line per restart seen, for the run's records

    def died(self) -> str | None:
        """Why the fabric's datapath is gone for good (None while it runs or is being
        restarted); a restart seen is noted in `restarts`."""
        for name, pid in self.pids.items():
            if pid is None or Path(f"/proc/{pid}").exists():
                continue
            now, new = self.clock(), _pid(name)
            if new is not None:
                self.restarts.append(f"the system's {name} restarted mid-run (pid {pid} -> "
                                     f"{new}): packets in flight then may have been lost")
                self.pids[name] = new
                self.down_since.pop(name, None)
                continue
            since = self.down_since.setdefault(name, now)
            if now - since >= RESTART_GRACE_S:
                return (f"the system's {name} (pid {pid}) exited and was not restarted within "
                        f"{RESTART_GRACE_S:.0f} s; {RESTART_HINT}")
        return None


def answers() -> bool:
    """Whether the system's Open vSwitch database answers (True where OVS is not
    installed at all: then nothing of ours can be in it)."""
    try:
        done = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True,
                              timeout=10)
    except FileNotFoundError:
        return True
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0
