"""How big a run will be, before it starts: requests, flows, periodic events, memory.

`testbed check` prints it; `simulate` and `emulate` refuse a run past the limits unless
--force, so a typo (a day of measurement at 100x load) ends in a sentence, not in a machine
swapping for an hour. The memory model is fitted on this project's own runs (2-core
development machine, peak RSS of `testbed simulate`): about 70 MB for the interpreter and
libraries, 3.5-5.4 KB per request (7,754 and 51,542 requests of the shipped trace, CLA*),
and about 125 MB per 1,000 GPUs per simulated minute (8,192 GPUs x 60 s: 1.0 GB).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

BASE_BYTES = 100e6
PER_REQUEST_BYTES = 6e3
PER_GPU_MINUTE_BYTES = 125e3
MAX_REQUESTS = 5_000_000  # per run
MAX_EVENTS = 100_000_000  # periodic events per run (refresh, background, levels, cycles)
MEMORY_SHARE = 0.8  # of the memory available when the run starts
# `--jobs auto` stays in this process for a sweep expected to take under SERIAL_S here:
# a pool of worker processes costs ~0.5 s to start. A run costs about RUN_S plus
# REQUEST_S per request (2-core machine, flow simulator: 9 runs of 56 requests in 0.5 s;
# one run of 2,777 requests on 1,024 GPUs in 1.5 s; both rounded down).
SERIAL_S = 2.0
RUN_S = 0.05
REQUEST_S = 2e-4


@dataclass(frozen=True)
class Estimate:
    points: int
    runs: int
    requests: int  # the largest run's
    flows: int
    periodic_events: int
    memory_bytes: float  # the largest run's peak, one process

    def lines(self) -> list[str]:
        return [f"{self.points} sweep point(s), {self.runs} run(s); the largest run: "
                f"~{self.requests:,} requests, ~{self.flows:,} KV flows, "
                f"~{self.periodic_events:,} periodic events, ~{self.memory_bytes / 1e6:,.0f} MB "
                "peak memory per process"]

    def refusals(self, available_bytes: float | None) -> list[str]:
        out = []
        if self.requests > MAX_REQUESTS:
            out.append(f"~{self.requests:,} requests in one run, more than {MAX_REQUESTS:,} "
                       "(lower workload.load or rate_rps, or the duration)")
        if self.periodic_events > MAX_EVENTS:
            out.append(f"~{self.periodic_events:,} periodic events in one run, more than "
                       f"{MAX_EVENTS:,} (raise oracle.refresh_s, background.change_s, "
                       "reprioritize_s or flowkv.cycle_s, or shorten the run)")
        if available_bytes is not None and self.memory_bytes > MEMORY_SHARE * available_bytes:
            out.append(f"~{self.memory_bytes / 1e9:,.1f} GB peak memory, more than "
                       f"{MEMORY_SHARE:.0%} of the {available_bytes / 1e9:,.1f} GB available")
        return out


def local_processes(size: Estimate, cores: int, available_bytes: float | None,
                    small_is_serial: bool = True) -> int:
    """How many processes `simulate --jobs auto` runs cells on: one per core, no more than
    there are runs or than memory holds (each at the largest run's peak), and one when
    the whole sweep is too small to repay starting them (`small_is_serial`)."""
    if small_is_serial and size.runs * (RUN_S + size.requests * REQUEST_S) < SERIAL_S:
        return 1
    n = min(cores, size.runs)
    if available_bytes is not None:
        n = min(n, int(MEMORY_SHARE * available_bytes // max(size.memory_bytes, 1.0)))
    return max(1, n)


def auto_processes(sizes: Sequence[Estimate], engine: str = "flow") -> int:
    """`--jobs auto` for scenarios run one after another on one pool, on this machine:
    local_processes of them together (all their runs, the largest run's size). An ns-3
    run takes seconds however small, so it always repays a process per core."""
    together = Estimate(sum(s.points for s in sizes), sum(s.runs for s in sizes),
                        max(s.requests for s in sizes), max(s.flows for s in sizes),
                        max(s.periodic_events for s in sizes),
                        max(s.memory_bytes for s in sizes))
    return local_processes(together, usable_cores(), available_memory(),
                           small_is_serial=engine == "flow")


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a container or taskset sets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def estimate(scenario) -> Estimate:
    """The scenario's size, from its cells' offered rates (no request list is built)."""
    sizes = cell_sizes(scenario)
    requests, flows, events, memory = max(sizes, key=lambda s: s[3])
    runs = sum(len(c.schedulers) * c.seeds for _, c in scenario.points())
    return Estimate(len(sizes), runs, requests, flows, events, memory)


def cell_sizes(scenario) -> list[tuple[int, int, int, float]]:
    """Each sweep point's run size, in the sweep's order: requests, KV flows, periodic
    events, peak memory (a pool starts the largest runs first, so that none is left
    running alone at the end)."""
    from testbed.workloads.build import offered_rate

    rates: dict[str, float] = {}
    sizes = []
    for _, point_scenario in scenario.points():
        key = json.dumps([point_scenario.workload.model_dump(mode="json"),
                          point_scenario.timing.model_dump(mode="json"),
                          point_scenario.cluster.model_dump(mode="json")], sort_keys=True)
        if key not in rates:
            rates[key] = offered_rate(point_scenario, point_scenario.seed)[0]
        sizes.append(_run_size(point_scenario, rates[key]))
    return sizes


def _run_size(cell, rate: float) -> tuple[int, int, int, float]:
    wl, spec = cell.workload, cell.cluster.spec()
    duration = wl.warmup_s + wl.measure_s
    requests = int(rate * duration) + 1
    flows = requests * (cell.network.flows_per_transfer or spec.tp)
    per_s = 1 / cell.oracle.refresh_s
    bg = cell.network.background
    if bg.tier1 or bg.tier2 or bg.tier3 or bg.jitter:
        per_s += len(spec.links) / bg.change_s
    if cell.network.flow_policy != "fair":
        per_s += 1 / cell.network.reprioritize_s
    if "flowkv" in cell.schedulers:
        per_s += 1 / cell.flowkv.cycle_s
    events = int(per_s * (duration + cell.drain_s))
    memory = (BASE_BYTES + requests * PER_REQUEST_BYTES
              + spec.n_gpus * PER_GPU_MINUTE_BYTES * max(1.0, duration / 60))
    return requests, flows, events, memory


def available_memory() -> float | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None
