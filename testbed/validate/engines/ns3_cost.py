"""What a validation on ns-3 will cost, said before it starts; and refused when its first
round alone is past the budget.

ns-3's time goes to packets: a run costs about the packets its devices put on a wire
over the engine's rate on this machine. The packets are counted from the flow model's
own run of the first seed (about a second a run): each KV shard's segments and their
delayed ACKs, once per link of its tier's path, as if none were lost. The rate (packets
so counted per CPU-second of the program and its Python driver) is measured on every
ns-3 validation here, from its runs' own transfers, and kept with the planner's figures
(the development machine's until then), so the loss recovery this machine's runs met is
in the rate. The first round of seeds (the pilot every plan starts from) is the least a
validation buys, so a scale, window or seed count whose first round does not fit the
budget is refused with the estimate and what would fit: the largest scale, the longest
window, the budget it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from testbed.model.tcp import SEGMENT_OVERHEAD
from testbed.validate.engines import machine_cache

RATE_KEY = "ns3_packets_per_cpu_s"
# packets per CPU-second of the engine (program and driver) on the 2-core development
# machine, counted as shard_packets counts them (segments and delayed ACKs, no loss
# recovery: about 0.7 of what the demo's runs put on wires, at 170-200 thousand a
# CPU-second there, benchmarks/bench_ns3_floor.py), a little under: an estimate should
# not promise what the machine cannot do
DEFAULT_RATE = 110_000.0
PATH_LINKS = {0: 2, 1: 2, 2: 4, 3: 6}  # links a tier's path crosses (host to host)
ACKS_PER_SEGMENT = 0.5  # a delayed ACK for every two segments
HEADER_BYTES = 84  # each shard's framing header (workers/protocol.py's, on both engines)
# a run's look and share of the judging, CPU seconds: on the development machine a demo
# run at 2e-4 took 2.3 s and its look and judging 0.16 and 0.57 of that; they carry no
# packets, so they are seconds at every scale (the demo at 1e-3: 16 s a seed in all on 2
# cores against 13 s of runs and 2.6 s counted so)
LOOK_S_PER_RUN = 0.4
JUDGE_S_PER_RUN = 1.3
JUDGING_S_PER_RUN = LOOK_S_PER_RUN + JUDGE_S_PER_RUN


def local_workers(executor) -> int:
    """The processes a plan's runs share here: a local executor's, else one (on Dask the
    plan is not this machine's)."""
    return executor.jobs if executor is not None and executor.kind == "local" else 1


def rate() -> tuple[float, str]:
    """(packets per CPU-second, where the figure comes from)."""
    measured = machine_cache.measured_here().get(RATE_KEY)
    if measured:
        return float(measured), "measured on this machine"
    return DEFAULT_RATE, "the development machine's figure: none measured here yet"


def wire_mss(scenario) -> int:
    """A full segment's payload on the packet engines' wire."""
    return scenario.emulation.frame_bytes - SEGMENT_OVERHEAD


def shard_packets(transfers: list[dict], scale: float, mss: int) -> float:
    """Packets the packet engines put on wires for these KV shards (transfers.csv rows,
    modelled bytes) were none lost: segments and delayed ACKs, once per link of the
    shard's path."""
    total = 0.0
    for t in transfers:
        segments = math.ceil((float(t["bytes"]) * scale + HEADER_BYTES) / mss)
        total += segments * (1 + ACKS_PER_SEGMENT) * PATH_LINKS.get(int(t["tier"]), 6)
    return total


@dataclass(frozen=True)
class FirstRound:
    """The first round's estimate: its runs, the packets of one seed's runs, and what they
    cost at `rate` packets per CPU-second on `workers` processes, each run's look and
    share of the judging (the flow model's runs and the statistics: no packets, so the
    same at every scale) `judging_s` more."""

    seeds: int
    runs: int
    packets_per_seed: float
    rate: float
    source: str
    workers: int
    judging_s: float = JUDGING_S_PER_RUN

    @property
    def wall_s(self) -> float:
        cpu = self.seeds * self.packets_per_seed / self.rate + self.runs * self.judging_s
        return cpu / max(1, min(self.workers, self.runs))

    @property
    def seed_cpu_s(self) -> float:
        """One seed's CPU: its packets and its runs' looks and judging."""
        return self.packets_per_seed / self.rate + self.runs / self.seeds * self.judging_s

    def plan_wall_s(self, seeds: int, cores: int) -> float:
        """A plan of `seeds` seeds on `cores` processes (no more busy than it has runs)."""
        runs = seeds * self.runs / self.seeds
        return seeds * self.seed_cpu_s / max(1, min(cores, runs))

    def line(self) -> str:
        return (f"{self.runs} runs ({self.seeds} seeds), about "
                f"{self.packets_per_seed * self.seeds:,.0f} packets at {self.rate:,.0f} a "
                f"CPU-second ({self.source}) on {self.workers} process(es): about "
                f"{self.wall_s / 60:.1f} min with their looks and judging")


def first_round(ns3_scenario, seeds: int, workers: int,
                judging_s: float = JUDGING_S_PER_RUN) -> FirstRound:
    """The first round on ns-3, its packets counted from the flow model's run of the first
    seed of every point and scheduler (the flow engine: about a second each)."""
    from testbed.cells import Task
    from testbed.runner import run_task

    packets, runs = 0.0, 0
    scale = ns3_scenario.emulation.scale
    mss = wire_mss(ns3_scenario)
    for index, (point, point_scenario) in enumerate(ns3_scenario.points()):
        for scheduler in point_scenario.schedulers:
            out = run_task(Task(index, point, point_scenario, scheduler, point_scenario.seed))
            packets += shard_packets(out["transfers"], scale, mss)
            runs += 1
    per_second, source = rate()
    return FirstRound(seeds, runs * seeds, packets, per_second, source, max(1, workers),
                      judging_s)


class PlanRefused(ValueError):
    """The plan's first round does not fit the budget (the message says what would)."""


def check_fits(ns3_scenario, seeds: int, workers: int, budget_s: float,
               judging_s: float = JUDGING_S_PER_RUN) -> FirstRound:
    """The first round's estimate, or PlanRefused when it alone is past the budget."""
    plan = first_round(ns3_scenario, seeds, workers, judging_s)
    if plan.wall_s <= budget_s:
        return plan
    share = budget_s / plan.wall_s
    window = ns3_scenario.workload.measure_s
    raise PlanRefused(
        f"ns-3's first round would not fit the budget ({budget_s / 60:.0f} min): "
        f"{plan.line()}. What would fit: ns3.scale <= {ns3_scenario.emulation.scale * share:.2g}, "
        f"or workload.measure_s <= {window * share:.3g} (packets grow with both), or "
        f"--budget {math.ceil(plan.wall_s / 60 * 1.2)}m, or more processes "
        "(--jobs, --dask); --force runs it anyway")


def record_rate(folder: Path, scale: float, mss: int) -> float | None:
    """After ns-3's runs in a run folder: this machine's rate, packets counted as the
    estimate counts them (from each run's own transfers: the loss recovery its runs met
    is in the rate, not in the count), folded into the planner's figures."""
    from testbed.inputs import read_json
    from testbed.records import read_csv

    packets = cpu = 0.0
    for cell in folder.glob("cells/*/*/seed*"):
        try:
            summary = read_json(cell / "summary.json", dict)
            rows = read_csv(cell / "transfers.csv")
        except Exception:  # a lost cell: the others still measure
            continue
        packets += shard_packets(rows, scale, mss)
        cpu += float(summary.get("engine_ns3_cpu_s") or 0.0) + \
            float(summary.get("engine_python_cpu_s") or 0.0)  # a run's driver too
    if packets <= 0 or cpu <= 0:
        return None
    machine_cache.record_timings({RATE_KEY: packets / cpu})
    return packets / cpu
