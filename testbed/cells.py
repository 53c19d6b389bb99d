"""The cell loop every engine shares: a scenario's cells (sweep point x scheduler x seed)
as tasks, their records written in the sweep's order whatever order they finish in, rows
aggregated over seeds, and the paper-style table. Which engine runs a cell is the
caller's: the simulated engines' in runner.py, the emulation's in emulation/."""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from testbed.lifecycle import TERMINAL_STATES
from testbed.metrics import aggregate
from testbed.model.extensions import plugins
from testbed.model.extensions.plugins import display_name
from testbed.model.recovery import ABORT, MIGRATE, RECOMPUTE
from testbed.records import RunFolder, atomic_write, interruption, write_json
from testbed.workloads.build import build_workload, workload_seed


class ConservationError(RuntimeError):
    """A request was lost or ended twice: always a bug, never a result."""


def check_conservation(requests: list[dict], expected: int) -> None:
    ids = Counter(r["id"] for r in requests)
    dup = [i for i, n in ids.items() if n > 1]
    bad = [r["id"] for r in requests if r["state"] not in TERMINAL_STATES]
    if len(ids) != expected or dup or bad:
        raise ConservationError(
            f"{expected} requests offered, {len(ids)} recorded; duplicated {dup[:5]}, "
            f"without a terminal state {bad[:5]}"
        )


SLUG_MAX = 96  # characters of a sweep point in a folder name (a file name holds 255)


def slug(point: dict) -> str:
    """A sweep point as a folder name: its fields and values, or, past SLUG_MAX
    characters (a fault list, a long description), their start and a hash of the whole,
    so every point keeps a name of its own that the filesystem can hold."""
    if not point:
        return "base"
    parts = [f"{_short(k)}-{v}" for k, v in point.items()]
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", "_".join(parts))
    if len(name) <= SLUG_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"{name[:SLUG_MAX - 13]}-{digest}"


@dataclass
class Row:
    point: dict
    scheduler: str
    stats: dict
    per_seed: list[dict] = field(default_factory=list)


@dataclass
class RunOutcome:
    folder: Path
    rows: list[Row]
    table: str
    wall_s: float
    lost: list[dict] = field(default_factory=list)


class RunsLost(RuntimeError):
    """Every run of a command failed: its folder is gone, the first failure is named."""


def count_runs(scenario) -> int:
    return len(scenario.points()) * len(scenario.schedulers) * scenario.seeds


def preflight(scenario) -> None:
    """Build every cell's workload and plugin scheduler before anything runs: bad input
    stops the whole run."""
    from testbed.control.plane import scenario_scheduler

    for key in scenario.schedulers:  # a plugin whose constructor fails is named now
        if not plugins.is_builtin(key):
            scenario_scheduler(scenario, key, scenario.seed)
    from testbed.flowsim.model_network import flow_network
    from testbed.model.extensions import network_models

    built = set()
    for _point, point_scenario in scenario.points():  # so is a network model's
        model = point_scenario.network.model
        if not network_models.is_max_min(model) and model not in built:
            flow_network(point_scenario.cluster.spec(), None, None, None, 1.0, model=model)
            built.add(model)
    for point, point_scenario in scenario.points():
        try:
            build_workload(point_scenario, point_scenario.seed)
            first, seeds = point_scenario.seed, point_scenario.seeds
            if point_scenario.workload.seed_segments and seeds > 1:  # the last segment too
                build_workload(point_scenario, max(workload_seed(point_scenario, k)
                                                   for k in range(first, first + seeds)))
        except ValueError as exc:
            where = f"sweep point {point}: " if point else ""
            raise ValueError(f"{where}{exc}") from None


@dataclass(frozen=True)
class Task:
    """One cell of a sweep: what a worker needs to simulate it on its own."""

    index: int
    point: dict
    scenario: object  # the Scenario with the sweep point applied
    scheduler: str
    seed: int
    follow: dict | None = None  # request id -> (prefill, decode) to take (model/follow.py)
    out: Path | None = None  # the cell's folder, for a worker on this machine to write
    engine: str = "flow"  # which simulated engine runs it (runner.ENGINES)

    @property
    def rel(self) -> str:
        return f"cells/{self.index:03d}-{slug(self.point)}/{self.scheduler}/seed{self.seed}"

    @property
    def label(self) -> str:
        return f"{slug(self.point)} {display_name(self.scheduler)} seed {self.seed}"


def tasks_of(scenario) -> list[Task]:
    return [Task(index, point, point_scenario, key, seed)
            for index, (point, point_scenario) in enumerate(scenario.points())
            for seed in range(point_scenario.seed, point_scenario.seed + point_scenario.seeds)
            for key in point_scenario.schedulers]


def run_cells(scenario, out_root: Path, engine: str, execute, title: str,
              on_step: Callable[[str], None] | None = None,
              describe: str = "serial", aggregate_fn=aggregate,
              epilogue: Callable[[], tuple[dict, str]] | None = None,
              seeds: Collection[int] | None = None) -> tuple[RunOutcome, RunFolder]:
    """The cell loop both engines share: a run folder; every task (sweep point x
    scheduler x seed, in the sweep's order) through `execute(tasks, folder)`, which yields
    (task, result or Lost) in any order; each result's records written to its cell (a
    result is {requests, transfers, links, summary, files: {name: json}}); rows per point
    and scheduler aggregated over seeds; the table and summary.json, each with what
    `epilogue()` adds once every task ran (summary fields, a table tail); `seeds`, only
    those of the scenario's seeds (a sequential validation's next round). The caller
    finishes the folder (it may add files first)."""
    from testbed.sweep import Lost

    t0 = time.perf_counter()
    folder = RunFolder(out_root, scenario.name, engine)
    atomic_write(folder.path / "scenario.yaml",
                 yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    tasks = [t for t in tasks_of(scenario) if seeds is None or t.seed in seeds]
    summaries: dict[tuple[int, str, int], dict] = {}
    lost: list[dict] = []
    try:
        for task, result in execute(tasks, folder.path):
            if isinstance(result, Lost):
                lost.append({"cell": task.rel, "error": result.error})
            else:
                if not result.get("written"):
                    folder.write_cell(task.rel, result["requests"], result["transfers"],
                                      result["links"], result["summary"])
                for name, doc in result.get("files", {}).items():
                    write_json(folder.path / task.rel / name, doc)
                summaries[(task.index, task.scheduler, task.seed)] = result["summary"]
            if on_step:
                on_step(task.label)
    except BaseException as exc:
        if not summaries and not folder.recorded():  # nothing to keep: no folder left
            folder.discard()
        else:
            folder.mark_interrupted(interruption(exc))
        raise
    if tasks and not summaries and not folder.recorded():
        folder.discard()
        raise RunsLost(f"every run failed, nothing was recorded (first: {lost[0]['cell']}: "
                       f"{lost[0]['error']})")
    rows: list[Row] = []
    for index, (point, point_scenario) in enumerate(scenario.points()):
        for key in point_scenario.schedulers:
            per = [summaries[(index, key, seed)] for seed in
                   range(point_scenario.seed, point_scenario.seed + point_scenario.seeds)
                   if (index, key, seed) in summaries]
            if per:  # every seed lost: the cell is listed under "Lost cells" instead
                rows.append(Row(point, key, aggregate_fn(per), per))
    table = format_table(scenario, rows, engine=title)
    fell_back = {r.scheduler: (r.stats.get("network_model_faults") or {}).get("total")
                 for r in rows}
    if any(fell_back.values()):  # the figures above are then not the model's alone
        table += (f"\nNetwork model {scenario.network.model}: transfers a seed timed by "
                  "fixed-bandwidth instead (summary.json network_model_faults): "
                  + ", ".join(f"{n:g} ({k})" for k, n in fell_back.items() if n) + ".\n")
    if lost:
        table += "\n## Lost cells\n\n" + "".join(f"- `{x['cell']}`: {x['error']}\n" for x in lost)
    extra, tail = epilogue() if epilogue else ({}, "")
    table += tail
    write_json(folder.path / "summary.json", {
        "scenario": scenario.name, "engine": engine, "executor": describe,
        "lost_cells": lost, **extra,
        "rows": [{"point": r.point, "scheduler": display_name(r.scheduler), "key": r.scheduler,
                  **r.stats} for r in rows],
    })
    atomic_write(folder.path / "table.md", table)
    return RunOutcome(folder.path, rows, table, time.perf_counter() - t0, lost), folder


def _short(key: str) -> str:
    """Column name for a sweep key: the last part of each field it sets."""
    return "+".join(f.strip().split(".")[-1] for f in key.split(","))


def _fmt(x: float, digits: int = 0) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _delta(row: Row, base: Row | None) -> str:
    if base is None or base is row:
        return "-"
    a, b = row.stats.get("ttft_mean_ms"), base.stats.get("ttft_mean_ms")
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b == 0:
        return "-"
    return f"{100 * (a - b) / b:+.1f}%"


def table_cells(scenario, rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and body of the paper-style table (Table II): one row per point x scheduler."""
    keys = list(scenario.sweep)
    head = [_short(k) for k in keys] + [
        "scheduler", "TTFT mean±std (ms)", "P50", "P99", "TBT (ms)", "SLO", "goodput (rps)",
        "xfer (ms)", "tiers T0:T1:T2:T3 (%)", "vs RR", "vs CLA*",
    ]
    faults = bool(scenario.faults) or any("faults" in k for k in keys)
    if faults:  # what the failures cost and how they were handled
        head += ["affected TTFT (ms)", "migrate:recompute:abort"]
    by_point: dict[str, dict[str, Row]] = {}
    for row in rows:
        by_point.setdefault(repr(row.point), {})[row.scheduler] = row
    body = []
    for row in rows:
        s = row.stats
        peers = by_point[repr(row.point)]
        tiers = ":".join(f"{100 * s.get('tier_share', {}).get(str(t), 0.0):.0f}" for t in range(4))
        body.append([str(row.point[k]) for k in keys] + [
            display_name(row.scheduler),
            # a metric no seed had (nothing completed: every request rejected) is "-"
            f"{_fmt(s.get('ttft_mean_ms'))}±{_fmt(s.get('ttft_mean_ms_std'))}",
            _fmt(s.get("ttft_p50_ms")), _fmt(s.get("ttft_p99_ms")),
            _fmt(s.get("tbt_mean_ms"), 2), _fmt(s.get("slo_attainment"), 3),
            _fmt(s.get("goodput_rps"), 2), _fmt(s.get("transfer_mean_ms")), tiers,
            _delta(row, peers.get("rr")), _delta(row, peers.get("cla")),
        ] + ([_fmt(s.get("affected_ttft_mean_ms")),
              ":".join(_fmt(s.get("recovery_decisions", {}).get(k), 1)
                       for k in (MIGRATE, RECOMPUTE, ABORT))] if faults else []))
    return head, body


def format_table(scenario, rows: list[Row], engine: str = "flow-level simulation") -> str:
    head, body = table_cells(scenario, rows)
    lines = [
        f"# {scenario.name}: {engine}",
        "",
        scenario.description.strip(),
        "",
        f"{scenario.seeds} seed(s) per cell; warm-up {scenario.workload.warmup_s:g} s excluded, "
        f"measurement {scenario.workload.measure_s:g} s.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"
