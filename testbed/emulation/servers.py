"""A point's seeds spread over servers through Dask, each seed on a server's own fabric.

Every Dask worker that offers the resource `fabric` (started with `--resources fabric=1`,
as root, from the same project version) is a server: it takes one seed at a time, all of
the point's schedulers, builds a fabric of its own for it (a lane: its own network
namespace and OVS daemon, so a server may also run other things) and sends back each
run's records and its run folder, packed. A server lost mid-seed costs nothing but time:
the scheduler hands the seed to another server (Dask re-runs the tasks of a lost worker),
and a seed that failed on servers `RETRIES + 1` times ends the run with the cause. With
every server gone for `ALONE_S` the run ends too, naming the unfinished seeds: Dask itself
would wait for a worker for ever.

The trace travels with each seed (compressed, in the task itself): servers need the
project, not the client's files, and a lost server takes no data with it (a trace
scattered once was kept on one worker only: Dask's memory manager drops extra copies, and
losing that worker lost the trace). Scheduler plugins must be installed on the servers.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from testbed.emulation.lanes import LanePool
from testbed.emulation.net import EmulationError

RESOURCE = "fabric"
RETRIES = 2
# how long a run waits with no server offering a fabric before it gives up: long enough
# for a worker to be restarted, far shorter than a seed's timeout (a hung server is only
# dropped after the scheduler's worker-ttl, 5 minutes by default, and this comes on top)
ALONE_S = 120.0
POLL_S = 2.0


class ServerError(EmulationError):
    """No server to run on, or a seed that failed on every try."""


def pack(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def unpack(blob: bytes, into: Path) -> None:
    """A packed run folder into `into`: regular files and folders only, none outside it
    (what a server sends is checked, not trusted)."""
    into.mkdir(parents=True, exist_ok=True)
    base = into.resolve()
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            target = (base / m.name).resolve()
            if not (m.isfile() or m.isdir()) or not target.is_relative_to(base):
                raise ServerError(f"a server sent a run folder with {m.name!r}: refused")
        tar.extractall(base, members=members)


def server_name() -> str:
    """The Dask worker's name (`dask worker --name`), else this machine's."""
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return socket.gethostname()


def run_seed(job: dict, trace: bytes | None) -> dict:
    """On a server: one seed of a point, every scheduler in order, on a fabric of its own.
    `job`: {"cell": scenario document, "seed", "runs": [{"id", "scheduler", "rel", "tag"}],
    "timeout_s"}. Returns {"server", "results": {id: {"records", "verdict"}}, "runs": {rel:
    packed folder}}."""
    from testbed.scenario import Scenario

    work = Path(tempfile.mkdtemp(prefix="netkv-server-"))
    try:
        data = dict(job["cell"])
        if trace is not None:
            (work / "trace.jsonl").write_bytes(zlib.decompress(trace))
            data["workload"] = {**data["workload"], "trace": str(work / "trace.jsonl")}
        cell = Scenario.model_validate(data)
        tasks = [{"id": r["id"], "scheduler": r["scheduler"], "seed": job["seed"],
                  "rundir": str(work / "runs" / r["rel"]), "tag": r["tag"]}
                 for r in job["runs"]]
        results = {}
        # a lane index no other worker on this machine holds: its process id
        with LanePool(1, cell, work / "lanes", start_timeout_s=300.0
                      + cell.emulation.start_timeout_s, first_index=os.getpid()) as pool:
            for job_id, reply in pool.run({pool.lanes[0].index: tasks}, job["timeout_s"]):
                if job_id is None or "error" in reply:
                    raise EmulationError(f"{server_name()}: {reply.get('error')}")
                path = Path(reply["path"])
                results[job_id] = json.loads(path.read_text())
                path.unlink()
        return {"server": server_name(), "results": results,
                "runs": {r["rel"]: pack(work / "runs" / r["rel"]) for r in job["runs"]}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def count_servers(address: str, wait_s: float = 60.0) -> int:
    """How many servers offer a fabric at `address` now (ServerError when none)."""
    with ServerPool(address, wait_s) as pool:
        return pool.size


class ServerPool:
    """The Dask scheduler at `address` and its workers that offer a fabric."""

    def __init__(self, address: str, wait_s: float = 60.0, connect_s: float = 10.0,
                 alone_s: float = ALONE_S):
        from distributed import Client

        self.address = address
        self.alone_s = alone_s
        try:
            self.client = Client(address, timeout=f"{connect_s:.0f}s")
        except (OSError, ValueError) as exc:
            raise ServerError(f"Dask scheduler {address}: cannot connect ({exc}); start one "
                              "with `dask scheduler` and workers with `dask worker ADDRESS "
                              f"--resources {RESOURCE}=1` as root on each server") from None
        self.traces: dict[str, bytes] = {}  # path -> its bytes, compressed
        try:
            self.wait_for_servers(wait_s)
        except ServerError:
            self.close()
            raise

    def wait_for_servers(self, wait_s: float) -> list[str]:
        """The servers, once there is one (a worker restarting between rounds is waited
        for); ServerError when none came in `wait_s`."""
        deadline = time.monotonic() + wait_s
        while not (names := self.servers()) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not names:
            raise ServerError(f"Dask scheduler {self.address}: no worker offers a fabric "
                              f"after {wait_s:.0f} s; start `dask worker {self.address} "
                              f"--nthreads 1 --resources {RESOURCE}=1` as root on each server")
        return names

    def servers(self) -> list[str]:
        """The workers that offer a fabric now (their names, or addresses)."""
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return sorted(w.get("name") or addr for addr, w in info.items()
                      if w.get("resources", {}).get(RESOURCE, 0) >= 1)

    @property
    def size(self) -> int:
        return len(self.servers())

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def _trace(self, cell):
        path = cell.workload.trace if cell.workload.synthetic is None else None
        if path is None:
            return None
        if path not in self.traces:
            self.traces[path] = zlib.compress(Path(path).read_bytes())
        return self.traces[path]

    def run(self, cell, jobs: list[dict], timeout_s: float) -> Iterator[tuple[dict, dict]]:
        """Each job (one seed, see run_seed) on some server; yields (job, its answer) as
        they finish. A lost server's seed runs again elsewhere (Dask re-runs it; a seed
        whose tries all failed raises ServerError with the last cause). With no server
        left for `alone_s` the run ends with ServerError rather than wait for one."""
        from distributed import wait

        doc = cell.model_dump(mode="json")
        trace = self._trace(cell)
        futures = {}
        for job in jobs:
            fut = self.client.submit(run_seed, {**job, "cell": doc}, trace, pure=False,
                                     resources={RESOURCE: 1}, retries=RETRIES)
            futures[fut] = job
        deadline = time.monotonic() + timeout_s * (1 + RETRIES)
        alone_since: float | None = None
        pending = list(futures)
        try:
            while pending:
                with contextlib.suppress(TimeoutError):
                    wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
                for fut in [f for f in pending if f.done()]:
                    pending.remove(fut)
                    yield futures[fut], self._answer(fut, futures[fut])
                if not pending:
                    break
                now = time.monotonic()
                unfinished = [futures[f]["seed"] for f in pending]
                if now > deadline:
                    raise ServerError(f"no server finished seed(s) {unfinished} in "
                                      f"{timeout_s * (1 + RETRIES):.0f} s; servers now: "
                                      f"{', '.join(self.servers()) or 'none'}")
                if self.servers():
                    alone_since = None
                elif alone_since is None:
                    alone_since = now
                elif now - alone_since >= self.alone_s:
                    raise ServerError(
                        f"no Dask worker at {self.address} has offered a fabric for "
                        f"{self.alone_s:.0f} s and seed(s) {unfinished} are unfinished: every "
                        "server was lost (a hung one is dropped after the scheduler's "
                        f"worker-ttl); start `dask worker {self.address} --nthreads 1 "
                        f"--resources {RESOURCE}=1` as root on a server, then run again")
        finally:
            for fut in futures:
                fut.cancel()

    @staticmethod
    def _answer(fut, job: dict) -> dict:
        try:
            return fut.result()
        except Exception as exc:  # noqa: BLE001 - KilledWorker, a run's error
            raise ServerError(f"seed {job['seed']} failed on the servers ({1 + RETRIES} "
                              f"tries): {type(exc).__name__}: {exc}") from None
