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
