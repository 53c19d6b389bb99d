"""Killing a run mid-way leaves no namespaces, veths, bridges or processes (issue 3)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from testbed.emulation import cleanup
from tests.conftest import ROOT, TRACE
from tests.emulation.conftest import wait_for, write_small

pytestmark = pytest.mark.root


def start_net(tmp_path, extra: dict | None = None) -> subprocess.Popen:
    path = write_small(tmp_path, TRACE, extra)
    log = (tmp_path / "net-up.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed", "net", "up", str(path), "--hold", "300",
         "--out", str(tmp_path / "runs")],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
        # as a CI runner's background job starts it: SIGINT ignored, which the child
        # inherits; `net up` must still tear down on it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    def ready():
        text = (tmp_path / "net-up.log").read_text()
        assert proc.poll() is None, text[-2000:]
        return "READY " in text  # printed once the fabric and its fidelity monitor run

    try:
        wait_for(ready, 120, "the fabric to come up")
    except BaseException:
        proc.kill()
        cleanup.clean()
        raise
    left = cleanup.find_leftovers()
    assert left.processes  # it is really up: bridges and veths in the root namespace, or
    assert (left.bridges and left.interfaces) if not extra else left.namespaces  # daemons
    return proc


SPLIT = {"emulation.ovs_instances": 2, "emulation.datapath": "user"}


@pytest.mark.parametrize(("sig", "extra"), [(signal.SIGTERM, None), (signal.SIGINT, None),
                                            (signal.SIGTERM, SPLIT)],
                         ids=["sigterm", "sigint", "sigterm-two-ovs-daemons"])
def test_a_signal_tears_everything_down(tmp_path, sig, extra):
    proc = start_net(tmp_path, extra)
    proc.send_signal(sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:  # leave nothing up for the tests after this one
        proc.kill()
        cleanup.clean()
        raise
    log = (tmp_path / "net-up.log").read_text()
    assert proc.returncode == 128 + sig, log[-3000:]  # 130 for SIGINT, 143 for SIGTERM
    assert "fabric down, nothing left behind" in log
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()
    (report,) = (tmp_path / "runs").glob("*/fidelity.json")
    assert json.loads(report.read_text())["verdict"] in ("faithful", "unfaithful")


@pytest.mark.parametrize("extra", [None, SPLIT], ids=["system-ovs", "two-ovs-daemons"])
def test_after_sigkill_testbed_clean_removes_the_leftovers(tmp_path, extra):
    proc = start_net(tmp_path, extra)
    proc.kill()
    proc.wait(timeout=10)
    assert not cleanup.find_leftovers().empty  # a SIGKILL leaves things behind
    out = subprocess.run([sys.executable, "-m", "testbed", "clean"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cleaned" in out.stdout
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout == ""
    assert not list(cleanup.STATE_DIR.glob("ovs*"))  # the daemons' databases and sockets
    again = subprocess.run([sys.executable, "-m", "testbed", "clean"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert again.stdout.strip() == "nothing to clean"


def test_a_crash_during_start_cleans_up(tmp_path):
    """An exception while building (here: a port already taken) leaves nothing half-started."""
    import socket

    from testbed.emulation.net import EmulatedNetwork, EmulationError
    from testbed.scenario import load_scenario

    path = write_small(tmp_path, TRACE, {"emulation.metrics_port": 9311})
    sc = load_scenario(path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 9311))
        busy.listen()
        with pytest.raises(EmulationError, match="metrics_port 9311"):
            EmulatedNetwork(sc, path, tmp_path / "run").start()
    assert cleanup.find_leftovers().empty


def test_fabrics_built_one_after_another_in_one_process_leave_nothing_open(tmp_path):
    """A script or a sweep builds many fabrics in one process: after the second, building
    and stopping one more leaves this process no more file descriptors or child
    processes than before (Mininet's RemoteController keeps a shell and a pty unless
    we end it)."""
    import os

    from testbed.emulation.net import EmulatedNetwork
    from testbed.scenario import load_scenario

    path = write_small(tmp_path, TRACE)
    sc = load_scenario(path)

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    counts = []
    for k in range(3):
        with EmulatedNetwork(sc, path, tmp_path / f"run{k}"):
            pass
        counts.append((fds(), len(cleanup.descendants(os.getpid()))))
    assert counts[2] == counts[1], counts
    assert cleanup.find_leftovers().empty
