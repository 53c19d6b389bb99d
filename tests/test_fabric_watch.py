"""The fabric's own parts watched during a run: the system's OVS daemons (restarted or
gone) and the hosts' namespaces. Real processes, no root."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from testbed.emulation.hosts import host_gone
from testbed.emulation.ovs import system_daemons

pytestmark = pytest.mark.serial  # processes watched as they start: runs alone


def _running(cmd: list[str]) -> subprocess.Popen:
    """A process whose command line the kernel shows already, as a daemon's is by the
    time it writes its pidfile (Popen can return, after vfork, before it does)."""
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 5
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.001)
    return proc


@pytest.fixture
def daemons(tmp_path, monkeypatch):
    """Processes whose command is named like the OVS daemons, with pidfiles in a run
    directory of their own (OVS_RUNDIR)."""
    monkeypatch.setenv("OVS_RUNDIR", str(tmp_path))
    started = []

    def start(name: str) -> subprocess.Popen:
        exe = tmp_path / name
        if not exe.exists():
            exe.symlink_to("/bin/sleep")
        proc = _running([str(exe), "300"])
        (tmp_path / f"{name}.pid").write_text(f"{proc.pid}\n")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_daemon_restarted_under_the_grace_is_noted_and_the_run_goes_on(daemons):
    db, vswitchd = daemons("ovsdb-server"), daemons("ovs-vswitchd")
    clock = Clock()
    watch = system_daemons.SystemOvsWatch(clock)
    assert watch.pids == {"ovsdb-server": db.pid, "ovs-vswitchd": vswitchd.pid}
    assert watch.died() is None
    vswitchd.kill()
    vswitchd.wait()
    clock.now = 3.0
    assert watch.died() is None  # down, within the grace: perhaps being restarted
    again = daemons("ovs-vswitchd")
    clock.now = 30.0
    assert watch.died() is None
    assert watch.restarts == [f"the system's ovs-vswitchd restarted mid-run (pid "
                              f"{vswitchd.pid} -> {again.pid}): packets in flight then may "
                              "have been lost"]


def test_a_daemon_down_past_the_grace_is_named_with_what_to_do(daemons):
    db, _ = daemons("ovsdb-server"), daemons("ovs-vswitchd")
    clock = Clock()
    watch = system_daemons.SystemOvsWatch(clock)
    db.kill()
    db.wait()
    assert watch.died() is None  # the grace starts when it is first seen down
    clock.now = system_daemons.RESTART_GRACE_S - 0.1
    assert watch.died() is None
    clock.now = system_daemons.RESTART_GRACE_S
    why = watch.died()
    assert why.startswith(f"the system's ovsdb-server (pid {db.pid}) exited and was not "
                          "restarted within 10 s")
    assert "ovs-ctl start" in why and "testbed clean" in why


def test_a_pidfile_naming_another_program_is_not_the_daemon(daemons, tmp_path):
    other = _running(["sleep", "300"])
    try:
        (tmp_path / "ovs-vswitchd.pid").write_text(str(other.pid))
        assert system_daemons.SystemOvsWatch().pids["ovs-vswitchd"] is None
    finally:
        other.kill()
        other.wait()


def test_no_system_ovs_is_nothing_to_watch(tmp_path, monkeypatch):
    monkeypatch.setenv("OVS_RUNDIR", str(tmp_path))
    watch = system_daemons.SystemOvsWatch()
    assert watch.pids == {"ovsdb-server": None, "ovs-vswitchd": None}
    assert watch.died() is None


def test_a_host_is_gone_with_its_process_and_lost_with_its_interface():
    assert host_gone("h0", os.getpid(), ["lo"]) is None
    assert host_gone("h0", os.getpid(), ["lo", "h0-eth0"]) == (
        "host h0 lost its interface h0-eth0: nothing leaves it")
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not Path(f"/proc/{proc.pid}").exists()
    assert host_gone("h3", proc.pid, ["h3-eth0"]).startswith(
        f"host h3 is gone: its network namespace went with its shell (pid {proc.pid})")
