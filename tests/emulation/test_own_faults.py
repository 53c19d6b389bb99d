"""The testbed's own parts failing while a packet-level run is under way: each run ends in
bounded time, keeps its records and says what happened, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.emulation import cleanup
from testbed.emulation.ovs import system_daemons
from tests.conftest import ROOT, TRACE
from tests.emulation.conftest import requests_ended, wait_for, write_small

pytestmark = [pytest.mark.root, pytest.mark.slow]

RUN = {"schedulers": ["rr"], "seeds": 1, "drain_s": 60, "workload.warmup_s": 1,
       "workload.measure_s": 14}


def test_a_killed_controller_leaves_a_fabric_that_forwards_and_an_oracle_that_goes_stale(
        tmp_path):
    """OpenFlow switches keep their flows without a controller, and hosts know their
    neighbours (static ARP): every request still completes; the oracle ages past its
    limit and the run's records say so."""
    proc, text, folder = _run_and_kill(tmp_path, "-m testbed controller")
    assert proc.returncode == 0, text[-3000:]
    (cell,) = folder.glob("cells/*/rr/seed*")
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["failed"] == 0 and summary["completed"] == summary["requests"] > 2
    assert summary["oracle_errors"] > 0 and summary["oracle_age_max_s"] > 5.0
    assert "oracle: went stale" in " ".join(text.split())
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()


def _run_and_break(tmp_path, fault, ended: int = 2, results=None, extra: dict | None = None
                   ) -> tuple[subprocess.Popen, str, object]:
    """`testbed emulate` of RUN, `fault()` done once `ended` requests ended, the run then
    left to end on its own: (the process, its output, the run folder)."""
    path = write_small(tmp_path, TRACE, {**RUN, **(extra or {})})
    results = results or tmp_path / "results"
    log = (tmp_path / "emulate.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "emulate", str(path), "--out",
                             str(results)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_for(lambda: requests_ended(results) >= ended, 240, f"{ended} requests to end")
        fault()
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            cleanup.clean()
    (folder,) = results.glob("*-emulation-*")
    return proc, (tmp_path / "emulate.log").read_text(), folder


def _run_and_kill(tmp_path, pattern: str, extra: dict | None = None):
    """As _run_and_break, the fault a SIGKILL to the first of our processes whose command
    line holds `pattern`."""
    def kill() -> None:
        pid = next(p for p in cleanup.our_processes() if pattern in cleanup._cmdline(p))
        os.kill(pid, signal.SIGKILL)
    return _run_and_break(tmp_path, kill, extra=extra)


def test_a_killed_router_ends_the_run_at_once_and_its_journal_keeps_what_ended(tmp_path):
    proc, text, folder = _run_and_kill(tmp_path, "testbed.workers router")
    assert proc.returncode == 2, text[-3000:]
    assert "the router died (killed by SIGKILL)" in text  # the part, and how
    assert "router died" in (folder / "PARTIAL").read_text()
    (cell,) = folder.glob("cells/*/rr/seed*")
    summary = json.loads((cell / "summary.json").read_text())
    assert "router died" in summary["partial"] and summary["ended"] >= 2
    rows = (cell / "requests.csv").read_text().splitlines()
    assert len(rows) - 1 == summary["ended"]  # every request that ended, from the journal
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()


def test_a_killed_prefill_worker_fails_its_requests_and_the_others_carry_on(tmp_path):
    proc, text, folder = _run_and_kill(tmp_path, "testbed.workers prefill")
    assert proc.returncode == 0, text[-3000:]
    assert re.search(r"worker i\d+ died \(exit -9\)", text), text[-3000:]
    (cell,) = folder.glob("cells/*/rr/seed*")
    reasons = [r.get("reason", "") for r in
               json.loads((cell / "router.json").read_text())["requests"]]
    lost = [r for r in reasons if r]
    # only what the dead instance held: later arrivals go to the prefill left alive, so
    # nothing waits out the drain limit
    assert lost and all("exited" in r for r in lost)
    assert sum(not r for r in reasons) > len(lost)
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of its own as the results disk, unmounted afterwards."""
    def mount(megabytes: int) -> Path:
        where = tmp_path / f"disk{megabytes}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs",
                        str(where)], check=True)
        mounted.append(where)
        return where

    mounted: list[Path] = []
    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_results_disk_without_room_is_refused_before_anything_starts(tmp_path, small_disk):
    disk = small_disk(8)
    path = write_small(tmp_path, TRACE, RUN)
    done = subprocess.run([sys.executable, "-m", "testbed", "emulate", str(path), "--out",
                           str(disk / "res")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "MB free, and a packet-level run needs at least" in " ".join(done.stderr.split())
    assert not (disk / "res").exists() or not any((disk / "res").iterdir())
    assert cleanup.find_leftovers().empty


def test_a_results_disk_that_fills_mid_run_stops_it_with_the_cause_and_the_journal(
        tmp_path, small_disk):
    disk = small_disk(300)

    def fill() -> None:  # dd stops at "no space left"
        subprocess.run(["dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=1M", "count=400"],
                       capture_output=True)

    proc, text, folder = _run_and_break(tmp_path, fill, ended=3, results=disk / "res")
    text = " ".join(text.split())
    assert proc.returncode == 2, text[-3000:]
    assert "error: the results disk is full at" in text
    assert (folder / "PARTIAL").exists()
    (cell,) = folder.glob("cells/*/rr/seed*")
    ended = [line for line in (cell / "journal.jsonl").read_text().splitlines()
             if '"kind": "request"' in line]
    assert len(ended) >= 3  # what had finished before the disk filled
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()


@pytest.mark.parametrize("pattern, part", [("ovs-vswitchd unix:", "ovs-vswitchd"),
                                           ("ovsdb-server", "ovsdb-server")],
                         ids=["ovs-vswitchd", "ovsdb-server"])
def test_a_private_ovs_daemon_that_dies_stops_the_run_at_once_naming_it(tmp_path, pattern,
                                                                          part):
    """Nobody restarts a private daemon (emulation.ovs_instances > 1): its switches are
    gone, so the run stops within a poll instead of waiting out its drain limit."""
    proc, text, folder = _run_and_kill(tmp_path, pattern, {"emulation.ovs_instances": 2,
                                                           "emulation.datapath": "user"})
    flat = " ".join(text.split())
    assert proc.returncode == 2, text[-3000:]
    assert f"error: the datapath died: {part} of OVS daemon" in flat
    assert "killed by SIGKILL" in flat
    assert "datapath died" in (folder / "PARTIAL").read_text()
    (cell,) = folder.glob("cells/*/rr/seed*")
    summary = json.loads((cell / "summary.json").read_text())
    assert "datapath died" in summary["partial"] and summary["outcome"] == "stopped by SIGTERM"
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()


@pytest.fixture
def system_ovs_restored():
    """Start the system's Open vSwitch again after a test that broke it, as its error
    tells the user to, then clean: the tests after this one need it whole."""
    yield
    subprocess.run(["/usr/share/openvswitch/scripts/ovs-ctl", "start", "--system-id=random"],
                   capture_output=True, check=False, timeout=120)
    wait_for(system_daemons.answers, 30, "the system's Open vSwitch to answer")
    cleanup.clean()


def _system_pid(name: str) -> int:
    return int((system_daemons.rundir() / f"{name}.pid").read_text())


@pytest.mark.parametrize("daemon", ["ovs-vswitchd", "ovsdb-server"])
def test_a_killed_system_ovs_daemon_stops_the_run_naming_it(tmp_path, daemon,
                                                             system_ovs_restored):
    """A SIGKILLed daemon is not restarted by its monitor: the fabric forwards nothing
    more (ovs-vswitchd gone, or spinning on its lost database), so the run stops within
    the restart grace instead of waiting out its drain limit, and says what to do."""
    proc, text, folder = _run_and_break(
        tmp_path, lambda: os.kill(_system_pid(daemon), signal.SIGKILL))
    flat = " ".join(text.split())
    assert proc.returncode == 2, text[-3000:]
    assert f"error: the datapath died: the system's {daemon} (pid" in flat
    assert "was not restarted" in flat and "ovs-ctl start" in flat
    assert "datapath died" in (folder / "PARTIAL").read_text()
    (cell,) = folder.glob("cells/*/rr/seed*")
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["ended"] >= 2 and "datapath died" in summary["partial"]
    # with the database down, bridges can be neither seen nor removed: clean says so
    if daemon == "ovsdb-server":
        out = subprocess.run([sys.executable, "-m", "testbed", "clean"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and "Open vSwitch is not answering" in out.stdout + \
            out.stderr
    assert not any(p for p in cleanup.our_processes())  # nothing of ours hangs on it


def test_a_crashed_system_ovs_vswitchd_is_restarted_and_the_run_says_so(
        tmp_path, system_ovs_restored):
    """ovs-ctl's --monitor restarts a crashed daemon; the controller re-installs the
    flows when the switches reconnect: every request completes, the records name it."""
    pid = _system_pid("ovs-vswitchd")
    parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    if b"monitoring" not in Path(f"/proc/{parent}/cmdline").read_bytes():
        pytest.fail("the system's ovs-vswitchd runs without --monitor (./run.sh starts it "
                    "with ovs-ctl, which adds it): nothing would restart it")
    proc, text, folder = _run_and_break(tmp_path, lambda: os.kill(pid, signal.SIGSEGV))
    assert proc.returncode == 0, text[-3000:]
    (cell,) = folder.glob("cells/*/rr/seed*")
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["failed"] == 0 and summary["completed"] == summary["requests"] > 2
    warnings = json.loads((cell / "fidelity.json").read_text())["warnings"]
    assert any(f"ovs-vswitchd restarted mid-run (pid {pid} ->" in w for w in warnings)
    assert "restarted mid-run" in " ".join(text.split())
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()


def test_a_controller_stopped_from_outside_past_the_staleness_limit(tmp_path):
    """SIGSTOP, never continued: the run finishes on its flows with a stale oracle, and
    the teardown still ends the stopped controller."""
    def stop() -> None:
        pid = next(p for p in cleanup.our_processes()
                   if "-m testbed controller" in cleanup._cmdline(p))
        os.kill(pid, signal.SIGSTOP)

    proc, text, folder = _run_and_break(tmp_path, stop)
    assert proc.returncode == 0, text[-3000:]
    (cell,) = folder.glob("cells/*/rr/seed*")
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["failed"] == 0 and summary["completed"] == summary["requests"] > 2
    assert summary["oracle_age_max_s"] > 5.0  # past recovery.oracle_max_age_s
    assert "oracle: went stale" in " ".join(text.split())
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()


def _namespace(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


def test_a_host_whose_namespace_is_deleted_stops_the_run_naming_it(tmp_path):
    """Every process in a prefill host's namespace killed (its Mininet shell, its
    worker): the kernel destroys the namespace and its veth. The run stops naming the
    host, keeps what ended, and the teardown copes with the node that is gone."""
    def delete() -> None:
        worker = next(p for p in cleanup.our_processes()
                      if "testbed.workers prefill" in cleanup._cmdline(p))
        inode, name = _namespace(worker), cleanup._cmdline(worker).split()[-1]
        inside = [int(e.name) for e in Path("/proc").iterdir()
                  if e.name.isdigit() and _namespace(int(e.name)) == inode]
        assert any(cleanup._cmdline(p).endswith(f"mininet:{name}") for p in inside)
        for pid in inside:
            os.kill(pid, signal.SIGKILL)

    proc, text, folder = _run_and_break(tmp_path, delete)
    flat = " ".join(text.split())
    assert proc.returncode == 2, text[-3000:]
    assert re.search(r"error: host i\d+ is gone: its network namespace went", flat), flat[-2000:]
    assert "is gone" in (folder / "PARTIAL").read_text()
    (cell,) = folder.glob("cells/*/rr/seed*")
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["ended"] >= 2 and "is gone" in summary["partial"]
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()
