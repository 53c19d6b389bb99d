"""Commands on the flow model: simulate, check, topology."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from testbed.cli.common import (
    _fail,
    console,
    force_option,
    main,
    out,
    report_model_faults,
    report_scheduler_faults,
    scenario_options,
)
from testbed.model.extensions.plugins import display_name
from testbed.ns3sim.program import Ns3Unavailable
from testbed.ns3sim.roce_notes import folder_notes
from testbed.workloads.mooncake import TraceError


@main.command()
@scenario_options(seeds=True, many=True)
@click.option("--out", "out_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Where run folders go.")
@click.option("--quiet", is_flag=True, help="No progress bar, no table; print the folder only.")
@click.option("--jobs", "-j", default="auto", show_default=True, metavar="N|auto",
              callback=lambda ctx, param, value: _jobs(value),
              help="Run cells on N local processes (0: one per core). auto: one per core, "
                   "no more than the runs or than memory holds at the estimated peak "
                   "(`testbed check`), and none beside this one for a small sweep.")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run cells on a Dask cluster (tcp://host:8786), or local:N for a local one.")
@click.option("--engine", type=click.Choice(["flow", "ns3"]), default="flow",
              show_default=True,
              help="flow: the flow-level model (max-min fluid network). ns3: every packet "
                   "simulated by ns-3 on the emulation's replica (TCP, queues, ECMP; no root; "
                   "deterministic; seconds per run: docs/ns3.md).")
@force_option
def simulate(scenario, out_dir: str, quiet: bool, jobs: int, dask_address: str | None,
             engine: str, force: bool) -> None:
    """Run SCENARIO in a simulated engine and print the comparison table.

    Every sweep point x scheduler x seed is one run (a cell); records go to
    OUT/<name>-flowsim-<stamp>/ (--engine ns3: <name>-ns3-<stamp>/; requests.csv,
    transfers.csv, links.csv and summary.json per run, ns3.json on ns-3; table.md and
    summary.json for the whole experiment). The same scenario and seed give the same
    records on either engine, byte for byte.
    Cells are independent: --jobs spreads them over local cores, --dask over a Dask
    cluster; the folder and table are the same as a serial run's. A cell that fails is
    retried once; one that fails again is listed as lost and the exit code is 1.

    Several scenarios run one after another on the same worker processes, a folder
    and a table each (the whole paper: testbed simulate scenarios/exp*.yaml).
    """
    from testbed.api import simulate_all
    from testbed.cells import ConservationError

    try:
        runs = simulate_all(list(scenario), out_dir, jobs=jobs, dask=dask_address,
                            force=force, progress=not quiet, engine=engine)
    except (TraceError, ValueError, Ns3Unavailable) as exc:
        _fail(str(exc))
    except ConservationError as exc:
        _fail(f"request conservation violated (a bug): {exc}")
    lost = False
    for run in runs:
        lost |= _show(run, quiet)
    if len(runs) > 1 and not quiet:
        total = sum(r.outcome.wall_s for r in runs)
        click.echo(f"{len(runs)} scenarios, {sum(_runs(r) for r in runs)} runs on "
                   f"{runs[0].executor} in {total:.1f} s.")
    if lost:
        sys.exit(1)


def _runs(run) -> int:
    from testbed.cells import count_runs

    return count_runs(run.scenario)


def _show(run, quiet: bool) -> bool:
    """One scenario's outcome: lost cells, plugin faults, the table (unless quiet) and
    where its records are; True if a cell was lost."""
    from testbed.cells import table_cells

    scenario, outcome = run.scenario, run.outcome
    report_scheduler_faults(run)
    report_model_faults(run)
    for x in outcome.lost:
        console.print(f"[bold red]lost cell[/] {x['cell']}: {x['error']}", highlight=False)
    if quiet:
        click.echo(str(outcome.folder))
        return bool(outcome.lost)
    if out.is_terminal:
        head, body = table_cells(scenario, outcome.rows)
        table = Table(*head, title=outcome.table.splitlines()[0].removeprefix("# "),
                      title_justify="left")
        for cells in body:
            table.add_row(*cells)
        out.print(table)
    else:  # a pipe or a log: the plain Markdown table, never truncated
        click.echo(outcome.table)
    for line in folder_notes(Path(outcome.folder)):  # ns-3's RoCE: where pauses stood
        console.print(f"[yellow]RoCE:[/] {line}", highlight=False)
    click.echo(f"{_runs(run)} runs on {run.executor} in {outcome.wall_s:.1f} s. "
               f"Records: {outcome.folder}")
    return bool(outcome.lost)


def _jobs(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        jobs = int(value)
    except ValueError:
        jobs = -1
    if not 0 <= jobs <= 4096:
        raise click.BadParameter(f"{value!r}: a number of processes from 0 (one per core) "
                                 "to 4096, or auto")
    return jobs


CHECK_BUILDS = 100_000  # requests; past this check describes the run from its estimate


@main.command()
@scenario_options()
def check(scenario) -> None:
    """Validate SCENARIO (every sweep point) and describe what it would run.

    Ends with the size of the largest run (requests, KV flows, periodic events, peak
    memory); a scenario past the limits (5M requests or 100M periodic events per run,
    80% of the available memory) exits 2 here, and simulate/emulate/validate refuse it
    unless --force.
    """
    from testbed.api import check_size
    from testbed.cells import preflight
    from testbed.estimate import available_memory, estimate
    from testbed.workloads.build import build_workload, offered_rate

    try:
        cells = scenario.points()
        size = estimate(scenario)
        if size.refusals(available_memory()):  # even one cell's workload could be too much
            for line in size.lines():
                out.print(f"size    : {line}")
            check_size(scenario, size=size)
        first = cells[0][1]
        # describing a large run from its offered rate keeps check under a second
        wl = build_workload(first, scenario.seed) if size.requests <= CHECK_BUILDS else None
        if wl is not None:  # what a run checks before it starts, check checks too
            preflight(scenario)
        rate, capacity = offered_rate(first, scenario.seed)
    except (TraceError, ValueError) as exc:
        _fail(str(exc))
    spec = scenario.cluster.spec()
    out.print(f"[bold]{scenario.name}[/]: {scenario.description.strip()}")
    out.print(f"cluster : {spec.describe()}")
    out.print(f"model   : {scenario.model_spec().name}; timing {scenario.timing.model_dump()}")
    src = "synthetic" if scenario.workload.synthetic else scenario.workload.trace
    out.print(f"workload: {scenario.workload.profile} from {src}; SLO {scenario.slo_s():g} s; "
              f"capacity {capacity:.2f} req/s; first cell offers {rate:.2f} req/s -> "
              + (f"{len(wl.requests)} requests" if wl else f"~{size.requests:,} requests "
                 "(estimated)")
              + f" in {scenario.workload.warmup_s + scenario.workload.measure_s:g} s"
              + (f" ({len(wl.history)} history requests prewarm the caches)" if wl else ""))
    out.print(f"compare : {', '.join(display_name(k) for k in scenario.schedulers)}; "
              f"{len(cells)} sweep point(s) x {scenario.seeds} seed(s) = "
              f"{len(cells) * len(scenario.schedulers) * scenario.seeds} runs")
    for key, values in scenario.sweep.items():
        out.print(f"sweep   : {key} in {values}")
    for line in size.lines():
        out.print(f"size    : {line}")
    if wl is not None:
        out.print(f"packets : {_validity_line(first, wl)}")
    out.print(f"fabric  : {_split_line(first)}")
    out.print("[green]scenario is valid[/]")


def _split_line(cell) -> str:
    """The datapath a packet-level run of `cell` would use here, and over how many OVS
    daemons (emulation.ovs_instances: auto is resolved from this machine's cores)."""
    from testbed.emulation.net import EmulationError, describe_split, plan_split

    try:
        return f"here, {describe_split(plan_split(cell)[1])}"
    except EmulationError as exc:
        return f"no packet-level run here: {exc}"

def _validity_line(scenario, wl) -> str:
    """Where the scenario's transfers sit against the replica's validity floor (tier 3,
    whole KV, no cache hits: the largest floor and the smallest transfers)."""
    from testbed.model.kv import kv_cache_bytes
    from testbed.validate.judging import validity

    try:
        by_tier = validity.floors(scenario)
    except ValueError:  # the replica's start-up excess outweighs any transfer's fluid time
        return (f"at scale {scenario.emulation.scale:g} no transfer of any size is valid on the "
                "replica: its links are too slow for the cluster it models; raise "
                "emulation.scale")
    worst = max(by_tier)
    floor = by_tier[worst]["transfer_floor_bytes"]
    model = scenario.model_spec()
    sizes = [float(kv_cache_bytes(model, r.input_len)) for r in wl.requests]
    below = sum(s < floor for s in sizes)
    line = (f"at scale {scenario.emulation.scale:g}, dilation {scenario.emulation.time_dilation:g}, "
            f"{below} of {len(sizes)} transfers fall below the validity floor "
            f"({floor / 1e6:.0f} MB at tier {worst}; testbed/validate/judging/validity.py)")
    clear = validity.scale_to_clear(scenario, sizes, [worst] * len(sizes))
    if clear:
        line += (f"; scale {clear['scale']:.2g} with time_dilation "
                 f"{clear['time_dilation']:.2g} lifts 90% above it")
    return line

@main.command()
@scenario_options()
@click.option("--links", is_flag=True, help="List every link too.")
def topology(scenario, links: bool) -> None:
    """Show the fat-tree SCENARIO describes: instances, tiers, switches, links."""
    spec = scenario.cluster.spec()
    out.print(spec.describe())
    table = Table("tier", "meaning", "Gbps per path", "latency (us)", "prefill->decode pairs")
    pairs = spec.tier_map.counts()
    from testbed.topologies.fattree import TIER_NAMES
    for t in range(4):
        table.add_row(str(t), TIER_NAMES[t], f"{spec.tier_bandwidth_gbps[t]:g}",
                      f"{spec.tier_latency_us[t]:g}", str(pairs.get(t, 0)))
    out.print(table)
    out.print("prefill: " + ", ".join(i.name for i in spec.prefill_pool))
    out.print("decode : " + ", ".join(i.name for i in spec.decode_pool))
    for layer, names in spec.switches.items():
        out.print(f"{layer:5}: {len(names)} switches")
    if links:
        for link in spec.links:
            out.print(f"  {link.a} -- {link.b}  {link.capacity_gbps:g} Gbps  tier {link.tier}")

@main.command()
def schedulers() -> None:
    """List the schedulers a scenario's `schedulers` may name.

    The built-ins (the paper's baselines and NetKV's ablation ladder) and every installed
    plugin (entry point group netkv_testbed.schedulers). Any 'module:Class' importable
    from the Python path works too, without installing: docs/schedulers.md shows how to
    write one.
    """
    from testbed.model.extensions import plugins

    table = Table("key", "scheduler", "from")
    for key, origin in plugins.available().items():
        try:
            name = plugins.display_name(key)
        except Exception as exc:  # noqa: BLE001 - a broken plugin is listed, not fatal
            name = f"(cannot load: {exc})"
        table.add_row(key, name, origin)
    out.print(table)


@main.command("network-models")
def network_models_cmd() -> None:
    """List the network models `network.model` and `validate --flow-model` may name.

    max-min (the flow model's own fluid sharing, with its TCP terms when
    network.flow_model is tcp), the four simple built-ins of serving simulators
    (fixed-bandwidth, latency-bandwidth, each with a -fair variant), and every installed
    plugin (entry point group netkv_testbed.network_models). Any 'module:Class'
    importable from the Python path works too: docs/schedulers.md#network-models.
    """
    from testbed.model.extensions import network_models

    table = Table("key", "what it does", "from")
    for key, (what, origin) in network_models.known().items():
        table.add_row(key, what, origin)
    out.print(table)
