"""Where a flow-level sweep's cells run: in this process, on local cores, or on Dask.

A cell (sweep point x scheduler x seed) is independent: it builds its own workload and
simulates it. Backends hand cells out and give results back in any order; the runner
writes them in the sweep's order, so every backend produces the same run folder and
table. A cell that fails (its worker died, or it raised) is tried once more; if it fails
again it is reported as lost, never dropped.

Dask: `Executor.dask("tcp://scheduler:8786")` submits to an existing cluster (every worker
needs the project and the trace at the same paths; the playbooks install both);
`Executor.dask("local:4")` starts a LocalCluster of 4 single-threaded worker processes.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

RETRIES = 1


@dataclass(frozen=True)
class Lost:
    task: Any
    error: str


class Executor:
    """Runs fn(task) for every task; yields (task, result) or (task, Lost).

    Used as a context manager, a local executor keeps its worker processes from one
    `map` to the next (several scenarios in a row start them once)."""

    def __init__(self, kind: str = "serial", jobs: int = 1, address: str | None = None):
        self.kind, self.jobs, self.address = kind, jobs, address
        self._pool: cf.ProcessPoolExecutor | None = None
        self._keep = False

    def __enter__(self) -> Executor:
        self._keep = True
        return self

    def __exit__(self, *exc) -> None:
        self._keep = False
        self._close()

    def _open(self, tasks: int) -> cf.ProcessPoolExecutor:
        if self._pool is None:  # fresh interpreters: no inherited state
            workers = self.jobs if self._keep else min(self.jobs, tasks)
            self._pool = cf.ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def _close(self, cancel: bool = False) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=cancel)
            self._pool = None

    @classmethod
    def serial(cls) -> Executor:
        return cls("serial")

    @classmethod
    def local(cls, jobs: int = 0) -> Executor:
        """jobs=0: one worker process per core."""
        return cls("local", jobs or os.cpu_count() or 1)

    @classmethod
    def dask(cls, address: str) -> Executor:
        return cls("dask", address=address)

    def describe(self) -> str:
        if self.kind == "local":
            return f"{self.jobs} local processes"
        if self.kind == "dask":
            return f"Dask at {self.address}"
        return "this process"

    def map(self, fn: Callable, tasks: list) -> Iterator[tuple[Any, Any]]:
        if self.kind == "serial" or (self.kind == "local" and self.jobs == 1):
            for task in tasks:
                yield task, _call_with_retry(fn, task)
        elif self.kind == "local":
            yield from self._pool_map(fn, tasks)
        else:
            yield from _dask_map(fn, tasks, self.address)

    def _pool_map(self, fn: Callable, tasks: list) -> Iterator[tuple[Any, Any]]:
        """A process pool; a dead worker breaks the pool, so failed cells get a fresh one."""
        attempts = {i: 0 for i in range(len(tasks))}
        pending = list(range(len(tasks)))
        while pending:
            failed: list[tuple[int, str]] = []
            pool = self._open(len(pending))
            futures = {pool.submit(fn, tasks[i]): i for i in pending}
            try:
                for fut in cf.as_completed(futures):
                    i = futures[fut]
                    try:
                        result = fut.result()
                    except Exception as exc:  # noqa: BLE001 - BrokenProcessPool included
                        failed.append((i, f"{type(exc).__name__}: {exc}"))
                        continue
                    yield tasks[i], result
            except BaseException:  # Ctrl-C, or the caller stopped: nothing more starts
                self._close(cancel=True)
                raise
            if failed or not self._keep:
                self._close()
            pending = []
            for i, error in failed:
                attempts[i] += 1
                if attempts[i] > RETRIES:
                    yield tasks[i], Lost(tasks[i], error)
                else:
                    pending.append(i)


def _call_with_retry(fn: Callable, task) -> Any:
    error = ""
    for _ in range(1 + RETRIES):
        try:
            return fn(task)
        except Exception as exc:  # noqa: BLE001 - reported as a lost cell below
            error = f"{type(exc).__name__}: {exc}"
    return Lost(task, error)


def _dask_map(fn: Callable, tasks: list, address: str) -> Iterator[tuple[Any, Any]]:
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if address.startswith("local:"):
        n = int(address.split(":", 1)[1] or 0) or os.cpu_count() or 1
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        address = cluster.scheduler_address
    try:
        with Client(address, timeout="30s") as client:
            futures = {client.submit(fn, t, pure=False): (t, 0) for t in tasks}
            done = as_completed(list(futures))
            for fut in done:
                task, tries = futures.pop(fut)
                try:
                    result = fut.result()
                except Exception as exc:  # noqa: BLE001 - KilledWorker on worker loss
                    if tries < RETRIES:
                        retry = client.submit(fn, task, pure=False)
                        futures[retry] = (task, tries + 1)
                        done.add(retry)
                    else:
                        yield task, Lost(task, f"{type(exc).__name__}: {exc}")
                    continue
                yield task, result
    finally:
        if cluster is not None:
            cluster.close()
