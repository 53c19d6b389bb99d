"""A Dask scheduler on loopback and fabric workers on this machine, standing for the
servers of `--dask` (no nanny: a killed worker stays dead, as a lost server does)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT

DASK = str(Path(sys.executable).parent / "dask")


def start(args: list[str], log: Path | None = None) -> subprocess.Popen:
    out = log.open("w") if log is not None else subprocess.DEVNULL
    return subprocess.Popen([DASK, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def scheduler(folder: Path, log: Path | None = None, wait_s: float = 60
              ) -> tuple[subprocess.Popen, str]:
    """A scheduler on a free loopback port, and its address once it has written it."""
    sched_file = folder / "scheduler.json"
    proc = start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                  "--scheduler-file", str(sched_file)], log)
    deadline = time.monotonic() + wait_s
    while not (sched_file.exists() and sched_file.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(timeout=30)
            raise AssertionError(f"no Dask scheduler in {wait_s:.0f} s")
        time.sleep(0.2)
    return proc, json.loads(sched_file.read_text())["address"]


def fabric_worker(address: str, name: str, log: Path | None = None) -> subprocess.Popen:
    """A worker that offers one fabric: a server."""
    return start(["worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                  "--resources", "fabric=1", "--name", name], log)
