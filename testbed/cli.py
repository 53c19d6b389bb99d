"""The `testbed` command line."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import click
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from testbed.model.schedulers import SCHEDULERS
from testbed.scenario import ScenarioError, load_scenario
from testbed.workloads.mooncake import TraceError

console = Console(stderr=True)
out = Console()


def _parse_sets(values: tuple[str, ...]) -> dict:
    overrides = {}
    for item in values:
        if "=" not in item:
            raise click.BadParameter(f"expected FIELD=VALUE, got {item!r}", param_hint="--set")
        key, raw = item.split("=", 1)
        overrides[key.strip()] = yaml.safe_load(raw)
    return overrides


def _load(path: str, sets: tuple[str, ...], seeds: int | None = None):
    overrides = _parse_sets(sets)
    if seeds is not None:
        overrides["seeds"] = seeds
    return load_scenario(path, overrides)


def _stepper(progress, task):
    """step(label): the previous run is done (from the second call on); show `label`."""
    seen = [0]

    def step(label: str) -> None:
        if seen[0]:
            progress.advance(task)
        seen[0] += 1
        progress.update(task, step=label)

    return step


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="netkv-testbed")
def main() -> None:
    """netkv-testbed: does network-aware KV-cache scheduling (NetKV) cut TTFT?

    Scenarios are YAML files (see scenarios/). Start with:

    \b
      testbed check scenarios/default.yaml      validate and describe a scenario
      testbed simulate scenarios/default.yaml   run it in the flow-level simulator
      testbed validate scenarios/validate.yaml  packets vs flow model (root)
      testbed provision --local                 make this machine a testbed host
    """


SET_HELP = "Override a scenario field, e.g. --set workload.load=2.0 (repeatable)."


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Where run folders go.")
@click.option("--seeds", type=click.IntRange(min=1), help="Repetitions (overrides the file).")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help=SET_HELP)
@click.option("--quiet", is_flag=True, help="No progress bar, no table; print the folder only.")
@click.option("--jobs", "-j", type=click.IntRange(min=0), default=1, show_default=True,
              help="Run cells on this many local processes (0: one per core).")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run cells on a Dask cluster (tcp://host:8786), or local:N for a local one.")
def simulate(scenario: str, out_dir: str, seeds: int | None, sets: tuple[str, ...],
             quiet: bool, jobs: int, dask_address: str | None) -> None:
    """Run SCENARIO in the flow-level simulator and print the comparison table.

    Every sweep point x scheduler x seed is one run (a cell); records go to
    OUT/<name>-flowsim-<stamp>/ (requests.csv, transfers.csv, links.csv and
    summary.json per run; table.md and summary.json for the whole experiment).
    Cells are independent: --jobs spreads them over local cores, --dask over a Dask
    cluster; the folder and table are the same as a serial run's. A cell that fails is
    retried once; one that fails again is listed as lost and the exit code is 1.
    """
    from testbed.runner import ConservationError, count_runs, run_flowsim, table_cells
    from testbed.sweep import Executor

    if dask_address and jobs != 1:
        _fail("give --jobs or --dask, not both")
    executor = (Executor.dask(dask_address) if dask_address
                else Executor.local(jobs) if jobs != 1 else Executor.serial())

    try:
        sc = _load(scenario, sets, seeds)
    except (ScenarioError, TraceError) as exc:
        _fail(str(exc))
    total = count_runs(sc)
    try:
        if quiet:
            outcome = run_flowsim(sc, Path(out_dir), executor=executor)
        else:
            with Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("{task.fields[step]}"), console=console,
            ) as progress:
                task = progress.add_task(sc.name, total=total, step="")
                step = _stepper(progress, task)
                outcome = run_flowsim(sc, Path(out_dir), step, executor=executor)
                progress.update(task, completed=total, step="done")
    except (TraceError, ValueError) as exc:
        _fail(str(exc))
    except ConservationError as exc:
        _fail(f"request conservation violated (a bug): {exc}")
    if outcome.lost:
        for x in outcome.lost:
            console.print(f"[bold red]lost cell[/] {x['cell']}: {x['error']}", highlight=False)
    if quiet:
        click.echo(str(outcome.folder))
        sys.exit(1 if outcome.lost else 0)
    if out.is_terminal:
        head, body = table_cells(sc, outcome.rows)
        table = Table(*head, title=f"{sc.name}: flow-level simulation", title_justify="left")
        for cells in body:
            table.add_row(*cells)
        out.print(table)
    else:  # a pipe or a log: the plain Markdown table, never truncated
        click.echo(outcome.table)
    click.echo(f"{total} runs on {executor.describe()} in {outcome.wall_s:.1f} s. "
               f"Records: {outcome.folder}")
    if outcome.lost:
        sys.exit(1)


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help=SET_HELP)
def check(scenario: str, sets: tuple[str, ...]) -> None:
    """Validate SCENARIO (every sweep cell) and describe what it would run."""
    from testbed.workloads.build import build_workload

    try:
        sc = _load(scenario, sets)
        cells = sc.cells()
        wl = build_workload(cells[0][1], sc.seed)
    except (ScenarioError, TraceError, ValueError) as exc:
        _fail(str(exc))
    spec = sc.cluster.spec()
    out.print(f"[bold]{sc.name}[/]: {sc.description.strip()}")
    out.print(f"cluster : {spec.describe()}")
    out.print(f"model   : {sc.model_spec().name}; timing {sc.timing.model_dump()}")
    src = "synthetic" if sc.workload.synthetic else sc.workload.trace
    out.print(f"workload: {sc.workload.profile} from {src}; SLO {sc.slo_s():g} s; "
              f"capacity {wl.capacity_rps:.2f} req/s; first cell offers {wl.rate_rps:.2f} req/s "
              f"-> {len(wl.requests)} requests in {sc.workload.warmup_s + sc.workload.measure_s:g} s"
              f" ({len(wl.history)} history requests prewarm the caches)")
    out.print(f"compare : {', '.join(SCHEDULERS[k] for k in sc.schedulers)}; "
              f"{len(cells)} sweep point(s) x {sc.seeds} seed(s) = "
              f"{len(cells) * len(sc.schedulers) * sc.seeds} runs")
    for key, values in sc.sweep.items():
        out.print(f"sweep   : {key} in {values}")
    out.print(f"packets : {_validity_line(cells[0][1], wl)}")
    out.print("[green]scenario is valid[/]")


def _validity_line(sc, wl) -> str:
    """Where the scenario's transfers sit against the replica's validity floor (tier 3,
    whole KV, no cache hits: the largest floor and the smallest transfers)."""
    from testbed.model.kv import kv_cache_bytes
    from testbed.validate import validity

    by_tier = validity.floors(sc)
    worst = max(by_tier)
    floor = by_tier[worst]["transfer_floor_bytes"]
    model = sc.model_spec()
    sizes = [float(kv_cache_bytes(model, r.input_len)) for r in wl.requests]
    below = sum(s < floor for s in sizes)
    line = (f"at scale {sc.emulation.scale:g}, dilation {sc.emulation.time_dilation:g}, "
            f"{below} of {len(sizes)} transfers fall below the validity floor "
            f"({floor / 1e6:.0f} MB at tier {worst}; testbed/validate/validity.py)")
    clear = validity.scale_to_clear(sc, sizes, [worst] * len(sizes))
    if clear:
        line += (f"; scale {clear['scale']:.2g} with time_dilation "
                 f"{clear['time_dilation']:.2g} lifts 90% above it")
    return line


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help=SET_HELP)
@click.option("--links", is_flag=True, help="List every link too.")
def topology(scenario: str, sets: tuple[str, ...], links: bool) -> None:
    """Show the fat-tree SCENARIO describes: instances, tiers, switches, links."""
    try:
        sc = _load(scenario, sets)
    except (ScenarioError, TraceError) as exc:
        _fail(str(exc))
    spec = sc.cluster.spec()
    out.print(spec.describe())
    table = Table("tier", "meaning", "Gbps per path", "latency (us)", "prefill->decode pairs")
    pairs = Counter(spec.tier_map.values())
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


class Terminated(BaseException):
    """Raised from the SIGTERM handler so every `finally` runs (Mininet's CLI eats Ctrl-C)."""


def _raise_terminated(signum, _frame):
    raise Terminated(signum)


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help=SET_HELP)
def controller(scenario: str, sets: tuple[str, ...]) -> None:
    """Run the SDN controller for SCENARIO's fabric (os-ken, OpenFlow 1.3).

    Serves the congestion oracle (GET /oracle, POST /intent, GET /status) and Prometheus
    metrics (/metrics) on emulation.bind, loopback by default. `testbed net up` starts
    it for you; run it by hand to point your own switches at it.
    """
    try:
        sc = _load(scenario, sets)
    except (ScenarioError, TraceError) as exc:
        _fail(str(exc))
    from testbed.controller.main import run
    from testbed.topologies.routing import packet_ecmp

    emu = sc.emulation
    run(sc.fabric(), emu.of_port, emu.oracle_port, emu.metrics_port, emu.bind, emu.poll_s,
        packet_ecmp(sc.network.ecmp), emu.kv_port)


@main.group()
def net() -> None:
    """The emulated fabric on its own (Mininet + Open vSwitch + controller)."""


@net.command("up")
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help=SET_HELP)
@click.option("--hold", type=float, default=None, metavar="SECONDS",
              help="No CLI: keep the fabric up this long (or until SIGTERM/Ctrl-C).")
@click.option("--out", "out_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Where the run's logs go.")
@click.option("--verbose", is_flag=True, help="Show Mininet's own progress.")
@click.option("--cluster", "cluster", type=click.Path(dir_okay=False), default=None,
              metavar="INVENTORY", help="Spread the fabric over the inventory's servers "
              "(Mininet cluster edition; see README 'Run across machines').")
@click.option("--placement", type=click.Choice(["switchbin", "roundrobin"]),
              default="switchbin", show_default=True, help="With --cluster: node placement.")
@click.option("--tunnel", type=click.Choice(["ssh", "gre"]), default="ssh",
              show_default=True, help="With --cluster: how links cross servers.")
def net_up(scenario: str, sets: tuple[str, ...], hold: float | None, out_dir: str,
           verbose: bool, cluster: str | None, placement: str, tunnel: str) -> None:
    """Build SCENARIO's fat-tree and open the Mininet CLI on it.

    Hosts are instances (i0, i1, ...), switches tor*/agg*/core*; every link is shaped to
    its modelled rate x emulation.scale by an HTB tree with one class per DSCP class.
    Try `pingall`, `i0 iperf3 -s -D` then `i15 iperf3 -c 10.0.0.1`, or
    `sh curl -s http://127.0.0.1:8000/oracle`. Leaving the CLI, Ctrl-C, SIGTERM or an
    error tears everything down; after a crash, `testbed clean` removes leftovers.
    """
    from testbed.emulation.net import EmulatedNetwork, EmulationError
    from testbed.records import atomic_write, stamp, write_json

    try:
        sc = _load(scenario, sets)
    except (ScenarioError, TraceError) as exc:
        _fail(str(exc))
    workdir = Path(out_dir) / f"{sc.name}-net-{stamp()}"
    workdir.mkdir(parents=True, exist_ok=True)
    scenario_file = workdir / "scenario.yaml"
    atomic_write(scenario_file, yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False))
    signal.signal(signal.SIGTERM, _raise_terminated)
    if cluster:
        from testbed.emulation.cluster import ClusterNetwork, servers_from_inventory
        from testbed.remote.inventory import InventoryError

        try:
            servers = servers_from_inventory(cluster)
        except InventoryError as exc:
            _fail(str(exc))
        network = ClusterNetwork(sc, scenario_file, workdir, servers, placement, tunnel,
                                 quiet=not verbose)
    else:
        network = EmulatedNetwork(sc, scenario_file, workdir, quiet=not verbose)
    monitor = None
    try:
        with console.status("building the fabric (controller, switches, HTB trees)..."):
            network.start()
        emu = sc.emulation
        fabric = network.fabric
        console.print(
            f"[green]fabric up[/]: {len(fabric.hosts)} hosts, {len(fabric.switches)} switches, "
            f"{len(fabric.links)} links, datapath {network.datapath}, scale {emu.scale:g}\n"
            f"oracle  http://{emu.bind}:{emu.oracle_port}/oracle\n"
            f"metrics http://{emu.bind}:{emu.metrics_port}/metrics\n"
            f"logs    {workdir}", highlight=False)
        from testbed.emulation.fidelity import FidelityMonitor

        monitor = FidelityMonitor(fabric, min_queue_packets=emu.queue_min_packets).start()
        click.echo(f"READY {workdir}", err=True)  # scripts wait for this line
        if hold is not None:
            deadline = time.monotonic() + hold
            while time.monotonic() < deadline:
                time.sleep(0.2)
        else:
            from mininet.cli import CLI

            CLI(network.net)
    except EmulationError as exc:
        _fail(str(exc))
    except (KeyboardInterrupt, Terminated):
        console.print("interrupted: tearing the fabric down")
    finally:
        if monitor is not None:  # interrupted runs are the ones whose fidelity matters most
            report = monitor.stop()
            write_json(workdir / "fidelity.json", report)
            console.print(f"fidelity: {report['verdict']} ("
                          f"{'; '.join(report['reasons']) or 'saturated links at rate, CPU ok'})")
        network.stop()
    console.print("fabric down, nothing left behind")


def _emulate(sc, out_dir: str, verbose: bool, quiet: bool):
    """Run the emulation with a progress bar; every exit path tears the fabric down."""
    from testbed.emulation.net import EmulationError
    from testbed.emulation.orchestrator import run_emulation
    from testbed.emulation.processes import WorkerError
    from testbed.runner import ConservationError, count_runs

    signal.signal(signal.SIGTERM, _raise_terminated)
    total = count_runs(sc)
    try:
        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[step]}"), console=console,
            disable=quiet,
        ) as progress:
            task = progress.add_task(f"{sc.name} (packets)", total=total, step="")
            run_step = _stepper(progress, task)

            def step(label: str, wall_s: float) -> None:
                if "building" in label:  # a fabric coming up is no run of its own
                    progress.update(task, step=label)
                else:
                    run_step(f"{label} (~{wall_s:.0f} s + drain)")

            outcome = run_emulation(sc, Path(out_dir), step, verbose=verbose)
            progress.update(task, completed=total, step="done")
    except (EmulationError, WorkerError) as exc:
        _fail(str(exc))
    except ConservationError as exc:
        _fail(f"request conservation violated (a bug): {exc}")
    except (KeyboardInterrupt, Terminated):
        console.print("interrupted: workers stopped, fabric torn down; the run folder is "
                      "marked PARTIAL")
        sys.exit(130)
    return outcome


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Where run folders go.")
@click.option("--seeds", type=click.IntRange(min=1), help="Repetitions (overrides the file).")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help=SET_HELP)
@click.option("--verbose", is_flag=True, help="Show Mininet's own progress.")
@click.option("--quiet", is_flag=True, help="No progress bar, no table; print the folder only.")
def emulate(scenario: str, out_dir: str, seeds: int | None, sets: tuple[str, ...],
            verbose: bool, quiet: bool) -> None:
    """Run SCENARIO on packets: Mininet fat-tree, SDN controller, real worker processes.

    Per sweep point the fabric is built once; each scheduler x seed then runs with fresh
    workers: a router (the scheduler service, reading the controller's oracle over HTTP),
    a load generator, and a prefill or decode worker inside every emulated host pushing
    real KV byte streams (one TCP stream per TP shard, AF41). Records go to
    OUT/<name>-emulation-<stamp>/ in the flow simulator's format plus fidelity.json.
    Needs root and Open Vswitch (./run.sh setup). Keep runs short: time is real, and
    warm-up + measurement + drain per run x schedulers x seeds adds up.
    """
    try:
        sc = _load(scenario, sets, seeds)
    except (ScenarioError, TraceError) as exc:
        _fail(str(exc))
    try:
        from testbed.runner import preflight

        preflight(sc)
    except (TraceError, ValueError) as exc:
        _fail(str(exc))
    outcome = _emulate(sc, out_dir, verbose, quiet)
    if quiet:
        click.echo(str(outcome.folder))
        return
    click.echo(outcome.table)
    click.echo(f"{count_runs_of(sc)} runs in {outcome.wall_s:.0f} s. Records: {outcome.folder}")


def count_runs_of(sc) -> int:
    from testbed.runner import count_runs

    return count_runs(sc)


def _calibration_lines(doc: dict) -> str:
    lines = []
    for tier, t in doc["tiers"].items():
        lines.append(f"tier {tier} ({' -> '.join(t['pair'])}): achieved {100 * t['factor']:.1f}% "
                     f"of the configured rate, fixed cost {1e3 * t['overhead_s']:.0f} ms per "
                     f"transfer (r2 {t['r2']:.3f})")
    fit = doc.get("tcp")
    if fit:
        lines.append(f"TCP terms: serialisation share {fit['serialisation']:.2f}, hop delay "
                     f"{1e6 * fit['hop_delay_s']:.0f} us wall; median |error| on the probes "
                     f"{100 * fit['median_abs_error']:.1f}% (fluid "
                     f"{100 * fit['fluid_median_abs_error']:.1f}%)")
    for c in doc.get("competing", []):
        lines.append(f"tier {c['tier']}, {c['competing']} competing: slowest "
                     f"{1e3 * c['slowest_s']:.0f} ms, fastest {1e3 * c['fastest_s']:.0f} ms; "
                     f"TCP model {100 * c['tcp_error']:+.1f}%, fluid {100 * c['fluid_error']:+.1f}%")
    return "\n".join(lines)


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out", "out_file", default=None, type=click.Path(dir_okay=False),
              help="Where to write the calibration (default: results/<name>-calibration.json).")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help=SET_HELP)
def calibrate(scenario: str, out_file: str | None, sets: tuple[str, ...]) -> None:
    """Measure what SCENARIO's emulated fabric really delivers, per tier.

    Lone KV transfers of 8 MB-8 GB (modelled; three decades) between one host pair per
    tier, and 1, 2 and 4 transfers of 0.5 GB started together on that path. A line fit
    gives each tier's capacity factor (achieved / configured rate) and fixed cost per
    transfer; a fit of the flow model's TCP terms (network.flow_model: tcp) gives the
    replica's serialisation share and per-hop delay; the competing transfers show both
    models' error under sharing. The file holds the samples, the fits and their
    residuals. A calibration holds only for the scale and time dilation it was taken at:
    `testbed validate --calibration FILE` refuses it for another. Use the factors in the
    flow model with --set network.capacity_factor='{1: f1, 2: f2, 3: f3}'. Needs root and
    Open vSwitch.
    """
    from testbed.emulation.net import EmulatedNetwork, EmulationError
    from testbed.records import atomic_write, stamp, write_json
    from testbed.validate.calibrate import calibrate as run_calibration

    try:
        sc = _load(scenario, sets)
    except (ScenarioError, TraceError) as exc:
        _fail(str(exc))
    if len(sc.cells()) > 1:
        console.print("note: calibrating the first sweep point's fabric only")
    cell = sc.cells()[0][1]
    workdir = Path("results") / f"{sc.name}-calibrate-{stamp()}"
    workdir.mkdir(parents=True, exist_ok=True)
    cell_file = workdir / "scenario.yaml"
    atomic_write(cell_file, yaml.safe_dump(cell.model_dump(mode="json"), sort_keys=False))
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        with console.status("building the fabric...") as status, \
                EmulatedNetwork(cell, cell_file, workdir) as network:
            doc = run_calibration(network, lambda label: status.update(label))
    except (EmulationError, RuntimeError, ValueError) as exc:
        _fail(str(exc))
    except (KeyboardInterrupt, Terminated):
        console.print("interrupted: fabric torn down")
        sys.exit(130)
    target = Path(out_file) if out_file else Path("results") / f"{sc.name}-calibration.json"
    write_json(target, doc)
    click.echo(_calibration_lines(doc))
    click.echo(f"capacity factors {doc['capacity_factor']} written to {target}")


@main.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Where the validation folder goes.")
@click.option("--calibration", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Use this calibration.json (from testbed calibrate) instead of measuring.")
@click.option("--seeds", type=click.IntRange(min=1), help="Repetitions (overrides the file).")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE", help=SET_HELP)
@click.option("--verbose", is_flag=True, help="Show Mininet's own progress.")
def validate(scenario: str, out_dir: str, calibration: str | None, seeds: int | None,
             sets: tuple[str, ...], verbose: bool) -> None:
    """Run SCENARIO on packets and in the flow model; report where they agree.

    Emulates every cell (calibrating the fabric first), simulates the same cells and
    seeds in the flow model (uncalibrated, calibrated, and with its TCP terms fitted by
    the calibration), replays the emulation's own transfers through each, and writes
    OUT/<name>-validate-<stamp>/report.md with comparison.json and plots/*.png.

    Every error comes with a bootstrap 95% confidence interval. Per scheduler, mean TTFT
    is paired over the requests both engines served and judged "agree within 5%",
    "disagree" or "inconclusive" (n too small, or the interval straddles the target):
    give more seeds (--seeds N) to narrow it. Runs the fidelity monitor flags are left
    out of the TTFT verdicts and named; transfers below the replica's validity floor
    (where TCP start-up at emulated rates swamps the transfer) are reported apart. The
    last lines say whether every run was faithful. Needs root and Open vSwitch.
    """
    from testbed.emulation.net import EmulationError
    from testbed.emulation.processes import WorkerError
    from testbed.runner import ConservationError, preflight
    from testbed.validate.pipeline import check_calibration, summary_lines
    from testbed.validate.pipeline import validate as run_validation

    try:
        sc = _load(scenario, sets, seeds)
        preflight(sc)
        cal = json.loads(Path(calibration).read_text()) if calibration else None
        if cal is not None and "capacity_factor" not in cal:
            raise ValueError(f"{calibration}: not a calibration file (no capacity_factor)")
        if cal is not None:
            check_calibration(cal, sc, calibration)
    except (ScenarioError, TraceError, ValueError) as exc:
        _fail(str(exc))
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        with console.status("validating...") as status:
            def step(label: str, wall_s: float) -> None:
                status.update(label + (f" (~{wall_s:.0f} s + drain)" if wall_s else ""))

            folder = run_validation(sc, Path(out_dir), cal, step, verbose=verbose)
    except ConservationError as exc:
        _fail(f"request conservation violated (a bug): {exc}")
    except (EmulationError, WorkerError, RuntimeError) as exc:
        _fail(str(exc))
    except (KeyboardInterrupt, Terminated):
        console.print("interrupted: workers stopped, fabric torn down; folders marked PARTIAL")
        sys.exit(130)
    doc = json.loads((folder / "comparison.json").read_text())
    for line in summary_lines(doc["targets"]):
        click.echo(line)
    click.echo(f"report: {folder / 'report.md'}")


@main.command()
@click.option("--inventory", "-i", type=click.Path(dir_okay=False), default=None,
              help="Provision the hosts of this Ansible inventory (over SSH).")
@click.option("--local", "local", is_flag=True, help="Provision this machine (needs root).")
@click.option("--check", is_flag=True, help="Dry run: report what would change.")
@click.option("--dev", is_flag=True, help="Also the test suite's tools (sshd, vagrant).")
@click.option("--quiet", is_flag=True, help="Only the summary and failures.")
def provision(inventory: str | None, local: bool, check: bool, dev: bool, quiet: bool) -> None:
    """Turn machines into testbed hosts with playbooks/testbed.yml (ansible-runner).

    Installs Mininet, Open vSwitch (kernel datapath where the kernel has it), iperf3,
    ethtool, Prometheus (scraping the controller) and the project in its virtual
    environment, and starts and enables the services. Idempotent: a second run changes
    nothing. Remote hosts get this checkout's tracked files in /opt/netkv-testbed;
    they need SSH with a known host key and sudo. A failure names the host and task.
    """
    from testbed.remote.provision import ProvisionError
    from testbed.remote.provision import provision as run_playbook

    if bool(inventory) == local:
        _fail("give --local or --inventory FILE (one of them)")
    target = "this machine" if local else inventory
    console.print(f"provisioning {target}{' (check mode)' if check else ''}...")
    try:
        outcome = run_playbook(Path(inventory) if inventory else None, check=check, dev=dev,
                               on_line=(lambda _line: None) if quiet else click.echo)
    except ProvisionError as exc:
        _fail(str(exc))
    for host, s in sorted(outcome.stats.items()):
        click.echo(f"{host}: ok={s.get('ok', 0)} changed={s.get('changed', 0)} "
                   f"failed={s.get('failures', 0)} unreachable={s.get('dark', 0)}")
    if not outcome.ok:
        for line in outcome.failures:
            console.print(f"[bold red]failed[/] {line}", highlight=False)
        sys.exit(1)


@main.group()
def remote() -> None:
    """Other machines over SSH: run, start, stop, follow logs, collect run records.

    Hosts come from an Ansible-style YAML inventory (the one `testbed provision` uses):
    ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file, and
    netkv_known_hosts for an extra known-hosts file. Unknown host keys are refused:
    add them first (ssh-keyscan HOST >> ~/.ssh/known_hosts, after checking them).
    Commands after `--` are sent as an argument list, each argument quoted.
    """


INVENTORY = click.option("--inventory", "-i", required=True, type=click.Path(dir_okay=False),
                         help="Ansible-style YAML inventory.")


def _remote_host(inventory: str, name: str):
    from testbed.remote.inventory import InventoryError, host_of
    from testbed.remote.ssh import RemoteError, RemoteHost

    try:
        return RemoteHost(host_of(inventory, name)).connect()
    except (InventoryError, RemoteError) as exc:
        _fail(str(exc))


@remote.command("run")
@INVENTORY
@click.argument("host")
@click.argument("argv", nargs=-1, required=True)
def remote_run(inventory: str, host: str, argv: tuple[str, ...]) -> None:
    """Run ARGV on HOST, streaming its output; exit with its exit code."""
    with _remote_host(inventory, host) as h:
        rc = h.stream(list(argv), click.echo)
    sys.exit(rc)


@remote.command("start")
@INVENTORY
@click.argument("host")
@click.option("--log", "log_path", required=True, help="Remote file for the output.")
@click.argument("argv", nargs=-1, required=True)
def remote_start(inventory: str, host: str, log_path: str, argv: tuple[str, ...]) -> None:
    """Start ARGV detached on HOST (e.g. `testbed net up ... --hold 3600`); print its pid."""
    with _remote_host(inventory, host) as h:
        click.echo(h.start(list(argv), log_path))


@remote.command("stop")
@INVENTORY
@click.argument("host")
@click.argument("pid", type=int)
def remote_stop(inventory: str, host: str, pid: int) -> None:
    """SIGTERM PID on HOST (SIGKILL after 5 s): testbed parts tear down on SIGTERM."""
    with _remote_host(inventory, host) as h:
        h.stop(pid)


@remote.command("logs")
@INVENTORY
@click.argument("host")
@click.argument("path")
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until Ctrl-C.")
def remote_logs(inventory: str, host: str, path: str, follow: bool) -> None:
    """Print a remote log (PATH on HOST), optionally following it as it grows."""
    with _remote_host(inventory, host) as h, contextlib.suppress(KeyboardInterrupt):
        h.follow(path, click.echo, until=lambda: not follow)


@remote.command("collect")
@INVENTORY
@click.argument("host")
@click.argument("remote_dir")
@click.option("--to", "local_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Local folder to copy into.")
def remote_collect(inventory: str, host: str, remote_dir: str, local_dir: str) -> None:
    """Copy a run folder from HOST into --to/<host>/<folder name>."""
    from testbed.remote.ssh import RemoteError

    target = Path(local_dir) / host / Path(remote_dir.rstrip("/")).name
    with _remote_host(inventory, host) as h:
        try:
            n = h.collect(remote_dir, target)
        except RemoteError as exc:
            _fail(str(exc))
    click.echo(f"{n} files -> {target}")


@main.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def clean(dry_run: bool) -> None:
    """Remove what crashed emulation runs left: OVS bridges, veths, processes, manifests.

    Only the project's own leftovers (tagged bridges, its node names, its manifests);
    other bridges on the machine are left alone.
    """
    from testbed.emulation import cleanup

    left = cleanup.find_leftovers()
    if left.empty:
        click.echo("nothing to clean")
        return
    for label, items in (("bridge", left.bridges), ("interface", left.interfaces),
                         ("process", left.processes), ("manifest", left.manifests)):
        for item in items:
            click.echo(f"{'would remove' if dry_run else 'removing'} {label} {item}")
    if not dry_run:
        cleanup.remove(left)
        after = cleanup.find_leftovers()
        if not after.empty:
            _fail(f"could not remove everything: {after.describe()}")
        click.echo(f"cleaned: {left.describe()}")


@main.command()
@click.argument("folder", type=click.Path(file_okay=False))
def judge(folder: str) -> None:
    """Judge a finished validation FOLDER again with today's flow model (no root).

    Keeps its packets run and calibration, runs the flow model anew (uncalibrated,
    calibrated, with TCP terms) beside the old runs, and rewrites comparison.json,
    report.md and plots/. Use it after changing the flow model or its network.tcp
    settings to see how the verdict moves, without emulating again.
    """
    from testbed.validate.pipeline import judge_again, summary_lines

    try:
        doc = judge_again(Path(folder))
    except (ValueError, ScenarioError, TraceError) as exc:
        _fail(str(exc))
    for line in summary_lines(doc["targets"]):
        click.echo(line)
    click.echo(f"report: {Path(folder) / 'report.md'}")


@main.command("compare")
@click.argument("reference", type=click.Path(file_okay=False))
@click.argument("model", type=click.Path(file_okay=False))
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Where report.md and comparison.json go (default: MODEL/compare).")
def compare_cmd(reference: str, model: str, out_dir: str | None) -> None:
    """Compare two run folders cell by cell: REFERENCE (e.g. packets) vs MODEL (flows).

    Pairs every transfer by (request, shard) and reports the model's relative error
    overall, per tier and per size bucket; per sweep point compares TTFT and transfer
    time per scheduler and whether both rank the schedulers the same. Two flow-level
    runs work too, e.g. per-transfer against per-flow ECMP.
    """
    from testbed.validate.report import RunFolderError, compare_runs

    out = Path(out_dir) if out_dir else Path(model) / "compare"
    try:
        doc = compare_runs(Path(reference), Path(model), out)
    except RunFolderError as exc:
        _fail(str(exc))
    t = doc["transfers"]
    click.echo(f"{doc['cells']} cells, {t['n']} transfers: median |error| "
               f"{100 * t['median_abs_error']:.1f}%, bias {100 * t['mean_error']:+.1f}%")
    for point, data in doc["points"].items():
        r = data["ranking"]
        click.echo(f"{point}: ranking {'agrees' if r['same_order'] else 'differs'} "
                   f"(tau {r['kendall_tau']:.2f})")
    click.echo(f"report: {out / 'report.md'}")
