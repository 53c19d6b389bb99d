"""Seeds spread over servers through Dask: two Dask workers on this machine stand for two
servers (each builds a fabric of its own in a network namespace); one is SIGKILLed while
its seed runs, and its seed is run again on the other, nothing lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.emulation import cleanup
from tests import dask_local
from tests.conftest import ROOT, TRACE
from tests.emulation.conftest import SLOWDOWN, wait_for, write_small

pytestmark = pytest.mark.root

@pytest.fixture
def servers(tmp_path):
    """A Dask scheduler on loopback and two fabric workers (no nanny: a killed one stays
    dead, as a lost server does); everything stopped afterwards."""
    sched, address = dask_local.scheduler(tmp_path, tmp_path / "scheduler.log",
                                          wait_s=60 * SLOWDOWN)
    procs = [sched]
    try:
        for name in ("server-a", "server-b"):
            procs.append(dask_local.fabric_worker(address, name, tmp_path / f"{name}.log"))
        yield address, {"server-a": procs[1], "server-b": procs[2]}
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def test_a_lost_server_s_seed_runs_again_on_another_and_nothing_is_lost(tmp_path, servers):
    address, workers = servers
    path = write_small(tmp_path, TRACE, {"seeds": 2, "schedulers": ["rr", "netkv-full"],
                                         "workload.warmup_s": 1.0, "workload.measure_s": 4.0})
    out = tmp_path / "results"
    log = (tmp_path / "emulate.log").open("w")
    run = subprocess.Popen([sys.executable, "-m", "testbed", "emulate", str(path), "--out",
                            str(out), "--dask", address, "--quiet"], cwd=ROOT, stdout=log,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    lost = workers["server-b"]
    try:
        # server-b's seed is under way once its fabric's namespace (lane = its pid) exists
        wait_for(lambda: Path(f"/run/netns/netkv-lane{lost.pid}").exists() or
                 run.poll() is not None, 300, "server-b to build its fabric")
        assert run.poll() is None, (tmp_path / "emulate.log").read_text()[-3000:]
        lost.send_signal(signal.SIGKILL)
        lost.wait(timeout=30)
        assert run.wait(timeout=900) == 0, (tmp_path / "emulate.log").read_text()[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
    (folder,) = out.glob("fabric-test-emulation-*")
    runs = json.loads((folder / "fidelity.json").read_text())["runs"]
    assert len(runs) == 2 * 2  # every scheduler x seed, none lost ...
    assert {r["server"] for r in runs} == {"server-a"}  # ... all finished on the survivor
    for r in runs:
        cell = folder / r["cell"]
        assert (cell / "requests.csv").read_text().count("\n") > 1
        assert (cell / "logs" / "router.log").exists()  # the run folder came back whole
    assert not (folder / "PARTIAL").exists()
    # the killed server's lane stopped with it (its fabric torn down on the parent's death);
    # what it could not remove, `testbed clean` does, and then nothing is left
    cleanup.clean()
    assert cleanup.find_leftovers().empty
    assert not any(p.name.startswith("netkv-lane") for p in Path("/run/netns").glob("*"))
    assert os.path.exists(folder / "table.md")
