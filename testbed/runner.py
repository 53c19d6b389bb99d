"""The simulated engines' runs: every cell of a scenario on the flow model or on ns-3, in
this process, on local cores or on Dask (the cell loop itself is cells.py's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from pathlib import Path

from testbed.cells import RunOutcome, Task, check_conservation, preflight, run_cells
from testbed.estimate import cell_sizes
from testbed.metrics import run_summary
from testbed.records import write_cell, write_json
from testbed.workloads.build import build_workload

# engine key -> (run folder's engine name, the table's title)
ENGINES = {"flow": ("flowsim", "flow-level simulation"),
           "ns3": ("ns3", "ns-3 packet-level simulation")}


def _simulate(engine: str):
    """The engine's one-cell run (ns-3's module is imported only where it runs)."""
    if engine == "ns3":
        from testbed.ns3sim.simulation import simulate

        return simulate
    from testbed.flowsim.simulator import simulate

    return simulate


_WORKLOADS: dict[tuple[str, int], object] = {}  # the last few, newest last


def _workload(scenario, seed: int):
    """A sweep point's workload for a seed, built once for all of its schedulers (they
    run one after another here, or close together on a pool's worker); the simulator
    only reads it."""
    key = (scenario.model_dump_json(), seed)
    workload = _WORKLOADS.pop(key, None)
    if workload is None:
        workload = build_workload(scenario, seed)
    _WORKLOADS[key] = workload
    while len(_WORKLOADS) > 2:
        del _WORKLOADS[next(iter(_WORKLOADS))]
    return workload


def run_task(task: Task) -> dict:
    """Simulate one cell (in any process): records and summary, checked."""
    workload = _workload(task.scenario, task.seed)
    result = _simulate(task.engine)(task.scenario, task.scheduler, task.seed, workload,
                                    task.follow)
    check_conservation(result.requests, len(workload.requests))
    summary = run_summary(result.requests, result.links, workload, result.decision_us,
                          result.counters)
    files = {f"{result.engine['engine']}.json": result.engine} if result.engine else {}
    if task.out is not None:
        write_cell(task.out, result.requests, result.transfers, result.links, summary)
        for name, doc in files.items():
            write_json(task.out / name, doc)
        return {"summary": summary, "written": True}
    return {"requests": result.requests, "transfers": result.transfers,
            "links": result.links, "summary": summary, "files": files}


def run_simulated(
    scenario, out_root: Path, on_step: Callable[[str], None] | None = None,
    executor=None, follow: Callable[[Task], dict | None] | None = None,
    engine: str = "flow", seeds: Collection[int] | None = None,
) -> RunOutcome:
    """Simulate every cell on `engine` (flow or ns3; on `executor`: serial by default);
    write the run folder in the sweep's order whatever order cells finish in; return the
    table rows. `follow` gives a cell the placements it takes instead of its own
    (Task.follow); `seeds`, only those of the scenario's seeds."""
    from testbed.sweep import Executor

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    preflight(scenario)
    executor = executor or Executor.serial()

    def execute(tasks, folder: Path):
        tasks = [dataclasses.replace(t, engine=engine) for t in tasks]
        if follow is not None:
            tasks = [dataclasses.replace(t, follow=follow(t)) for t in tasks]
        if executor.kind != "dask":  # this machine's processes write their own cells
            tasks = [dataclasses.replace(t, out=folder / t.rel) for t in tasks]
        if executor.kind != "serial":  # largest first: no long run left alone at the end
            sizes = cell_sizes(scenario)
            tasks = sorted(tasks, key=lambda t: -sizes[t.index][0])
        return executor.map(run_task, tasks)

    name, title = ENGINES[engine]
    outcome, folder = run_cells(scenario, out_root, name, execute, title, on_step,
                                executor.describe(), seeds=seeds)
    if outcome.lost:
        folder.mark_interrupted(f"{len(outcome.lost)} cell(s) lost after a retry: "
                                + "; ".join(x["cell"] for x in outcome.lost))
    else:
        folder.finish()
    return outcome
