"""Commands on packets: the controller, the fabric, emulate, calibrate, validate, clean
(those over finished run folders are in cli/folders.py)."""

from __future__ import annotations

import time
from pathlib import Path

import click
import yaml

from testbed.cli.common import (
    Terminated,
    _fail,
    capture_option,
    console,
    force_option,
    handle_signals,
    main,
    report_model_faults,
    report_scheduler_faults,
    scenario_options,
)
from testbed.cli.options import (
    MAX_REPEATS,
    Duration,
    Fraction,
    Number,
    dask_option,
    fabrics_option,
)
from testbed.workloads.mooncake import TraceError


@main.command()
@scenario_options()
@click.option("--openflow-socket", "openflow_sockets", type=click.Path(dir_okay=False),
              multiple=True, help="also accept OpenFlow on this unix socket (switches of OVS "
              "daemons in other network namespaces: emulation.ovs_instances > 1); repeatable")
@click.option("--cluster", "cluster", type=click.Path(dir_okay=False), default=None,
              metavar="INVENTORY", help="The fabric is spread over this inventory's servers: "
              "read their switches' tc counters over SSH too.")
def controller(scenario, openflow_sockets, cluster) -> None:
    """Run the SDN controller for SCENARIO's fabric (os-ken, OpenFlow 1.3).

    Serves the congestion oracle (GET /oracle, POST /intent, GET /status) and Prometheus
    metrics (/metrics) on emulation.bind, loopback by default. `testbed net up` starts
    it for you; run it by hand to point your own switches at it (with
    emulation.ovs_instances "auto" it expects them in the root namespace).
    """
    from testbed.sdn.main import run
    from testbed.topologies.placement import private_daemons
    from testbed.topologies.routing import packet_ecmp
    from testbed.topologies.traffic_classes import kv_ports

    emu = scenario.emulation
    read = None
    if cluster:
        from testbed.remote.counters import cluster_counters
        from testbed.remote.inventory import InventoryError

        try:
            read = cluster_counters(cluster)
        except InventoryError as exc:
            _fail(str(exc))
    run(scenario.fabric(), emu.of_port, emu.oracle_port, emu.metrics_port, emu.bind, emu.poll_s,
        packet_ecmp(scenario.network.ecmp), kv_ports(emu.kv_port, emu.kv_transport),
        0 if emu.ovs_instances == "auto" else private_daemons(emu), openflow_sockets,
        emu.token, read)

def cluster_options(fn):
    """--cluster INVENTORY, --placement, --tunnel: one fabric over several machines."""
    fn = click.option("--tunnel", type=click.Choice(["ssh", "gre"]), default="ssh",
                      show_default=True, help="With --cluster: how links cross servers.")(fn)
    fn = click.option("--placement", type=click.Choice(["pod", "switchbin", "roundrobin"]),
                      default="pod",
                      show_default=True,
                      help="With --cluster: node placement. pod: each pod on one server, "
                      "core switches dealt out (only aggregation-core links cross servers); "
                      "switchbin: switches in even bins by name, hosts with their ToR; "
                      "roundrobin: every node in turn.")(fn)
    return click.option(
        "--cluster", "cluster", type=click.Path(dir_okay=False), default=None,
        metavar="INVENTORY", help="Spread the fabric over the inventory's servers (Mininet "
        "cluster edition; see docs/provisioning.md 'Run across machines').")(fn)


@main.group()
def net() -> None:
    """The emulated fabric on its own (Mininet + Open vSwitch + controller)."""

@net.command("up")
@scenario_options()
@click.option("--hold", type=Number(0, 30 * 86400, unit=" s"), default=None, metavar="SECONDS",
              help="No CLI: keep the fabric up this long (or until SIGTERM/Ctrl-C).")
@click.option("--out", "out_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Where the run's logs go.")
@click.option("--verbose", is_flag=True, help="Show Mininet's own progress.")
@cluster_options
def net_up(scenario, hold: float | None, out_dir: str,
           verbose: bool, cluster: str | None, placement: str, tunnel: str) -> None:
    """Build SCENARIO's fat-tree and open the Mininet CLI on it.

    Hosts are instances (i0, i1, ...), switches tor*/agg*/core*; every link is shaped to
    its modelled rate x emulation.scale by an HTB tree with one class per DSCP class.
    Try `pingall`, `i0 iperf3 -s -D` then `i15 iperf3 -c 10.0.0.1`, or
    `sh curl -s http://127.0.0.1:8000/oracle`. Leaving the CLI, Ctrl-C, SIGTERM or an
    error tears everything down; after a crash, `testbed clean` removes leftovers.
    """
    from testbed.emulation.net import EmulatedNetwork, EmulationError, describe_split
    from testbed.records import atomic_write, stamp, write_json

    workdir = Path(out_dir) / f"{scenario.name}-net-{stamp()}"
    workdir.mkdir(parents=True, exist_ok=True)
    scenario_file = workdir / "scenario.yaml"
    atomic_write(scenario_file, yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    handle_signals()
    if cluster:
        from testbed.emulation.multi_machine import ClusterNetwork, servers_from_inventory
        from testbed.remote.inventory import InventoryError

        try:
            servers = servers_from_inventory(cluster)
        except InventoryError as exc:
            _fail(str(exc))
        network = ClusterNetwork(scenario, scenario_file, workdir, servers, placement, tunnel,
                                 quiet=not verbose)
    else:
        network = EmulatedNetwork(scenario, scenario_file, workdir, quiet=not verbose)
    monitor = None
    try:
        with console.status("building the fabric (controller, switches, HTB trees)..."):
            network.start()
        emu = scenario.emulation
        fabric = network.fabric
        console.print(
            f"[green]fabric up[/]: {len(fabric.hosts)} hosts, {len(fabric.switches)} switches, "
            f"{len(fabric.links)} links, {describe_split(network.split)}, "
            f"scale {emu.scale:g}\n"
            f"oracle  http://{emu.bind}:{emu.oracle_port}/oracle\n"
            f"metrics http://{emu.bind}:{emu.metrics_port}/metrics\n"
            f"logs    {workdir}", highlight=False)
        from testbed.emulation.fidelity import FidelityMonitor

        monitor = FidelityMonitor(fabric, min_queue_packets=emu.queue_min_packets,
                                  datapath=network.datapath, netns=network.interface_netns,
                                  read=network.read_counters).start()
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
        raise  # after the teardown below: exit 130 (SIGINT) or 143 (SIGTERM)
    finally:
        if monitor is not None:  # interrupted runs are the ones whose fidelity matters most
            report = monitor.stop()
            write_json(workdir / "fidelity.json", report)
            console.print(f"fidelity: {report['verdict']} ("
                          f"{'; '.join(report['reasons']) or 'saturated links at rate, CPU ok'})")
            for line in report["warnings"]:
                console.print(f"  warning: {line}")
            for line in report["advice"]:
                console.print(f"  advice: {line}")
        network.stop()
        console.print("fabric down, nothing left behind")

def _emulate(scenario, out_dir: str, verbose: bool, quiet: bool, force: bool, **cluster):
    """The API's emulate with a progress bar and its live line (per-tier congestion,
    transfers in flight); every exit path tears the fabric down. `cluster`: the
    --cluster, --placement and --tunnel options."""
    from testbed.api import emulate as run_emulation
    from testbed.cells import ConservationError
    from testbed.emulation.net import EmulationError
    from testbed.emulation.processes import WorkerError

    handle_signals()
    try:
        return run_emulation(scenario, out_dir, force=force, progress=not quiet, verbose=verbose,
                             **cluster)
    except (EmulationError, WorkerError, TraceError, ValueError) as exc:
        _fail(str(exc))
    except ConservationError as exc:
        _fail(f"request conservation violated (a bug): {exc}")
    except (KeyboardInterrupt, Terminated):
        console.print("interrupted: workers stopped, fabric torn down; the run folder is "
                      "marked PARTIAL")
        raise  # the CLI's boundary: exit 130 (SIGINT) or 143 (SIGTERM)

@main.command()
@scenario_options(seeds=True)
@click.option("--out", "out_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Where run folders go.")
@click.option("--verbose", is_flag=True, help="Show Mininet's own progress.")
@click.option("--quiet", is_flag=True, help="No progress bar, no table; print the folder only.")
@force_option
@cluster_options
@fabrics_option
@dask_option
@capture_option
def emulate(scenario, out_dir: str, verbose: bool, quiet: bool, force: bool,
            cluster: str | None, placement: str, tunnel: str, fabrics: int | str,
            dask_address: str | None) -> None:
    """Run SCENARIO on packets: Mininet fat-tree, SDN controller, real worker processes.

    Per sweep point the fabric is built once; each scheduler x seed then runs with fresh
    workers: a router (the scheduler service, reading the controller's oracle over HTTP),
    a load generator, and a prefill or decode worker inside every emulated host pushing
    real KV byte streams (one TCP stream per TP shard, AF41). Records go to
    OUT/<name>-emulation-<stamp>/ in the flow simulator's format plus fidelity.json.
    Needs root and Open Vswitch (./run.sh setup). Keep runs short: time is real, and
    warm-up + measurement + drain per run x schedulers x seeds adds up. With --cluster
    the fabric and the workers spread over the inventory's servers; set emulation.bind
    to this machine's address on their network (and emulation.token).
    """
    run = _emulate(scenario, out_dir, verbose, quiet, force, cluster=cluster, placement=placement,
                   tunnel=tunnel, fabrics=fabrics, dask=dask_address)
    report_scheduler_faults(run)
    if quiet:
        click.echo(str(run.folder))
        return
    click.echo(run.table)
    click.echo(f"{count_runs_of(scenario)} runs in {run.wall_s:.0f} s. Records: {run.folder}")

def count_runs_of(scenario) -> int:
    from testbed.cells import count_runs

    return count_runs(scenario)

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
    if fit and "contention_idle" in fit:
        lines.append(f"link contention: idle share {100 * fit['contention_idle']:.0f}%, the "
                     f"time a stream loses to competitors stretched "
                     f"{1 / (1 - fit['contention_idle']):.2f}x (median of "
                     f"{len(fit['contention_estimates'])} competing probes)")
    for c in doc.get("competing", []):
        lines.append(f"tier {c['tier']}, {c['competing']} x {c['bytes'] / 1e6:.0f} MB "
                     f"competing{' (spaced)' if c['spacing_s'] > 1e-3 else ''}: slowest "
                     f"{1e3 * c['slowest_s']:.0f} ms, fastest {1e3 * c['fastest_s']:.0f} ms; "
                     f"TCP model {100 * c['tcp_error']:+.1f}% ({100 * c['contended_error']:+.1f}%"
                     f" with contention), fluid {100 * c['fluid_error']:+.1f}%")
    return "\n".join(lines)

@main.command()
@scenario_options()
@click.option("--out", "out_file", default=None, type=click.Path(dir_okay=False),
              help="Where to write the calibration (default: results/<name>-calibration.json).")
def calibrate(scenario, out_file: str | None) -> None:
    """Measure what SCENARIO's emulated fabric really delivers, per tier.

    Lone KV transfers of 8 MB-8 GB (modelled; three decades) between one host pair per
    tier, and competing ones on that path: 1, 2, 4 and 8 of 0.5 GB started together, 8 of
    32 MB, 2 of 2 GB, and 4 of 0.5 GB each starting half a lone one's time after the
    previous. A line fit gives each tier's capacity factor (achieved / configured rate)
    and fixed cost per transfer; a fit of the flow model's TCP terms (network.flow_model:
    tcp) gives the replica's serialisation share and per-hop delay; the competing
    transfers give the contention delay (network.tcp.contention_idle: how much longer
    the time a transfer loses to competitors is on packets) and both models' error under
    sharing. The file holds
    the samples, the fits and their residuals. A calibration holds only for the scale and
    time dilation it was taken at: `testbed validate --calibration FILE` refuses it for
    another. Use the factors in the flow model with --set
    network.capacity_factor='{1: f1, 2: f2, 3: f3}'. Needs root and Open vSwitch.
    """
    from testbed.emulation.net import EmulatedNetwork, EmulationError
    from testbed.records import atomic_write, stamp, write_json
    from testbed.validate.engines.fabric_probes import calibrate as run_calibration

    if len(scenario.points()) > 1:
        console.print("note: calibrating the first sweep point's fabric only")
    point_scenario = scenario.points()[0][1]
    workdir = Path("results") / f"{scenario.name}-calibrate-{stamp()}"
    workdir.mkdir(parents=True, exist_ok=True)
    cell_file = workdir / "scenario.yaml"
    atomic_write(cell_file, yaml.safe_dump(point_scenario.model_dump(mode="json"), sort_keys=False))
    handle_signals()
    try:
        with console.status("building the fabric...") as status, \
                EmulatedNetwork(point_scenario, cell_file, workdir) as network:
            doc = run_calibration(network, lambda label: status.update(label))
    except (EmulationError, RuntimeError, ValueError) as exc:
        _fail(str(exc))
    except (KeyboardInterrupt, Terminated):
        console.print("interrupted: fabric torn down")
        raise  # the CLI's boundary: exit 130 (SIGINT) or 143 (SIGTERM)
    target = Path(out_file) if out_file else Path("results") / f"{scenario.name}-calibration.json"
    write_json(target, doc)
    click.echo(_calibration_lines(doc))
    click.echo(f"capacity factors {doc['capacity_factor']} written to {target}")

@main.command()
@scenario_options(seeds=True)
@click.option("--out", "out_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="Where the validation folder goes.")
@click.option("--calibration", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Use this calibration.json (from testbed calibrate) instead of measuring.")
@click.option("--target-ci", "target_ci", type=Fraction(), default=None, metavar="W",
              help="Sequential: aim for a 95%-style interval of half-width W (e.g. 4% or "
              "0.04: 4 points) on every primary claim (each scheduler's mean-TTFT gain, flow "
              "model minus packets); plan rounds x window from a flow-model pilot, print the "
              "expected time, stop once every primary claim is resolved.")
@click.option("--budget", "budget", type=Duration(), default=None, metavar="T",
              help="Sequential: wall-time budget (e.g. 9m, 540s, 1h); the plan fits in it and "
              "no round starts that would not. On ns-3: how long seeds may be added "
              "(default 30m; on both engines the whole validation's, 10m at least ns-3's).")
@click.option("--calibration-max-age", "max_age_h", type=Number(0, 10**6, unit=" hours"), default=24.0,
              show_default=True, metavar="HOURS",
              help="Reuse this machine's cached calibration of the same fabric (scale, "
              "dilation, datapath, code version) while younger than this.")
@click.option("--recalibrate", is_flag=True,
              help="Measure the fabric anew (and refresh the cache) instead of reusing it.")
@click.option("--verbose", is_flag=True, help="Print every figure's line before the answer "
              "(per-transfer errors, targets, each claim's intervals, the ranking), and "
              "Mininet's own progress.")
@click.option("--repeats", type=Number(0, MAX_REPEATS, integer=True), default=0, show_default=True,
              metavar="N", help="Run the first seed N more times on packets (RR alone where "
              "it is scheduled) and report how far packets are from themselves per transfer: "
              "the floor for any flow model's error. Each costs one more packet run. On "
              "ns-3, which repeats a seed exactly, each run is perturbed: every KV shard "
              "starts up to one frame's time on the fastest link late (ns3.start_jitter_us).")
@click.option("--packets", type=click.Choice(["auto", "emulation", "ns3", "both"]),
              default="auto", show_default=True,
              help="Whose packets judge the flow model: the emulation (root), ns-3's "
                   "(no root; every cell a process on every core, or on --dask; calibrated "
                   "on ns-3's own probes), or both: the emulation's validation, ns-3 "
                   "judged against the emulation on its seeds (does ns-3 stand in for "
                   "Linux TCP?), and the flow model against ns-3. auto: both where this "
                   "machine can run the fabric, ns-3 otherwise. On ns-3 a scenario of one "
                   "seed gets seeds added in doubling rounds, each its own trace segment, "
                   "until every mean-TTFT claim is conclusive or --budget is spent; --seeds "
                   "N (2 or more) judges exactly N.")
@click.option("--flow-model", "flow_models", multiple=True, metavar="NAME",
              help="Judge this network model too (repeatable): a built-in "
              "(fixed-bandwidth, fixed-bandwidth-fair, latency-bandwidth, "
              "latency-bandwidth-fair), an installed plugin or 'module:Class' "
              "(`testbed network-models` lists them). Each is replayed on the packets' "
              "transfers and run deciding, on every packet engine judged, and gets a row "
              "beside max-min (the verdict's model) after the answer and in the report.")
@click.option("--emulation-budget", "emulation_budget", type=Duration(), default=None,
              metavar="T", help="Both engines: the emulation adds seeds, planned from its "
              "first, until ns-3's mean-TTFT claims against it are conclusive or T is spent.")
@force_option
@fabrics_option
@dask_option
def validate(scenario, out_dir: str, calibration: str | None, target_ci: float | None,
             budget: float | None, max_age_h: float, recalibrate: bool, repeats: int,
             verbose: bool, packets: str, flow_models: tuple[str, ...], force: bool,
             fabrics: int | str, dask_address: str | None,
             emulation_budget: float | None) -> None:
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
    (where TCP start-up at emulated rates swamps the transfer) are reported apart. Needs
    root and Open vSwitch (with --packets ns3, neither: ns-3 simulates the packets,
    docs/ns3.md). By default (--packets auto) a machine that can run the fabric runs
    both packet engines: the flow model is judged against ns-3 on as many seeds as its
    claims need, and ns-3 against the emulation on the emulation's seeds; without root,
    ns-3 alone.

    It ends with the answer: whether the paper's claims hold on packets and whether the
    flow model's gains agree, one row per mean-TTFT claim, what would settle the
    inconclusive ones, whether the packets can be trusted, and the report's path
    (--verbose prints every figure's line before it).

    The paper's claims: each scheduler's gain over RR and CLA* (mean and P99 TTFT, SLO
    attainment) on packets and in the flow model, paired by request across schedulers
    and engines, with block-bootstrap intervals; "agree" when flow minus packets lies
    within +-5 points, "disagree" when entirely outside; the ranking with its
    probability. With --target-ci and/or --budget the run is sequential: e.g.

      testbed validate scenarios/validate.yaml --target-ci 4% --budget 9m

    prints its plan and expected time before the fabric starts, judges after every
    round (one more trace segment per scheduler) at an alpha-spending level, and stops
    when every mean-TTFT claim is resolved, the width is reached or the budget is spent
    (docs/validation.md, "The statistics of a verdict").
    """
    from testbed.api import validate as run_validation
    from testbed.cells import ConservationError
    from testbed.emulation.net import EmulationError, fabric_unavailable
    from testbed.emulation.processes import WorkerError

    handle_signals()
    if packets == "both" and (why := fabric_unavailable()):
        _fail(f"--packets both: {why}; --packets ns3 runs without the fabric")
    if packets == "auto":
        why = fabric_unavailable()
        packets = "ns3" if why else "both"
        if why:
            console.print(f"note: packets on ns-3 alone ({why}); --packets both with root")
    if emulation_budget is not None and packets != "both":
        _fail(f"--emulation-budget: for ns-3 against the emulation; packets: {packets}")
    try:
        result = run_validation(scenario, out_dir, calibration=calibration, force=force,
                                progress=True, verbose=verbose, target_ci=target_ci,
                                budget_s=budget, reuse_calibration=not recalibrate,
                                calibration_max_age_s=3600.0 * max_age_h, fabrics=fabrics,
                                dask=dask_address, repeats=repeats, packets=packets,
                                flow_models=flow_models, emulation_budget_s=emulation_budget)
    except ConservationError as exc:
        _fail(f"request conservation violated (a bug): {exc}")
    except (EmulationError, WorkerError, TraceError, RuntimeError, ValueError) as exc:
        _fail(str(exc))
    except (KeyboardInterrupt, Terminated):
        console.print("interrupted: workers stopped, fabric torn down; folders marked PARTIAL")
        raise  # the CLI's boundary: exit 130 (SIGINT) or 143 (SIGTERM)
    report_scheduler_faults(result.emulation)
    for run in result.flow.values():  # the verdict's model, if a plugin, fell back
        report_model_faults(run)
    for line in (result.summary_lines() + [""] if verbose else []) + result.answer_lines():
        click.echo(line)
    click.echo(f"Report: {result.report}")

@main.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def clean(dry_run: bool) -> None:
    """Remove what crashed emulation runs left: OVS bridges, veths, processes, manifests,
    and private OVS daemons with their namespaces (netkv-ovs<k>).

    Only the project's own leftovers (tagged bridges, its node names, its manifests);
    other bridges on the machine are left alone.
    """
    from testbed.emulation import cleanup
    from testbed.emulation.ovs import system_daemons

    left = cleanup.find_leftovers()
    for label, items in (("bridge", left.bridges), ("interface", left.interfaces),
                         ("process", left.processes), ("manifest", left.manifests),
                         ("namespace", left.namespaces)):
        for item in items:
            click.echo(f"{'would remove' if dry_run else 'removing'} {label} {item}")
    if not dry_run and not left.empty:
        cleanup.remove(left)
        after = cleanup.find_leftovers()
        if not after.empty:
            _fail(f"could not remove everything: {after.describe()}")
    if not system_daemons.answers():  # its bridges are out of sight, not gone
        _fail("Open vSwitch is not answering (`ovs-vsctl show` failed), so a fabric's "
              "bridges can be neither found nor removed: start it again "
              "(/usr/share/openvswitch/scripts/ovs-ctl start, or systemctl restart "
              "openvswitch-switch), then run `testbed clean` again")
    click.echo("nothing to clean" if left.empty else
               f"{'would clean' if dry_run else 'cleaned'}: {left.describe()}")
