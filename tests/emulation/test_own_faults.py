"""The testbed's own parts failing while a packet-level run is under way: each run ends in
bounded time, keeps its records and says what happened, and leaves nothing behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from testbed.emulation import cleanup
from tests.conftest import ROOT, TRACE
from tests.emulation.conftest import requests_ended, wait_for, write_small

pytestmark = [pytest.mark.root, pytest.mark.slow]

RUN = {"schedulers": ["rr"], "seeds": 1, "drain_s": 60, "workload.warmup_s": 1,
       "workload.measure_s": 14}


def _controller_pids() -> list[int]:
    return [p for p in cleanup.our_processes()
            if "-m testbed controller" in cleanup._cmdline(p)]


def test_a_killed_controller_leaves_a_fabric_that_forwards_and_an_oracle_that_goes_stale(
        tmp_path):
    """OpenFlow switches keep their flows without a controller, and hosts know their
    neighbours (static ARP): every request still completes; the oracle ages past its
    limit and the run's records say so."""
    path = write_small(tmp_path, TRACE, RUN)
    results = tmp_path / "results"
    log = (tmp_path / "emulate.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "emulate", str(path), "--out",
                             str(results)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_for(lambda: requests_ended(results) >= 2, 240, "two requests to end")
        (pid,) = _controller_pids()
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=240)  # bounded: the run ends on its own
    finally:
        if proc.poll() is None:
            proc.kill()
            cleanup.clean()
    text = (tmp_path / "emulate.log").read_text()
    assert proc.returncode == 0, text[-3000:]
    (cell,) = results.glob("*/cells/*/rr/seed*")
    summary = json.loads((cell / "summary.json").read_text())
    assert summary["failed"] == 0 and summary["completed"] == summary["requests"] > 2
    assert summary["oracle_errors"] > 0 and summary["oracle_age_max_s"] > 5.0
    assert "oracle: went stale" in " ".join(text.split())
    left = cleanup.find_leftovers()
    assert left.empty, left.describe()


def _run_and_kill(tmp_path, pattern: str) -> tuple[subprocess.Popen, str, object]:
    """`testbed emulate` of RUN with the first of our processes whose command line holds
    `pattern` SIGKILLed once two requests ended; the run left to end on its own."""
    path = write_small(tmp_path, TRACE, RUN)
    results = tmp_path / "results"
    log = (tmp_path / "emulate.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "testbed", "emulate", str(path), "--out",
                             str(results)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_for(lambda: requests_ended(results) >= 2, 240, "two requests to end")
        pid = next(p for p in cleanup.our_processes() if pattern in cleanup._cmdline(p))
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            cleanup.clean()
    (folder,) = results.glob("*-emulation-*")
    return proc, (tmp_path / "emulate.log").read_text(), folder


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
