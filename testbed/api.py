"""The testbed as a library: load a scenario, run it in either engine, read DataFrames.

    from testbed import load_scenario, simulate
    scenario = load_scenario("scenarios/default.yaml", {"workload.measure_s": 10}, seeds=1)
    run = simulate(scenario)
    print(run.requests.groupby("scheduler").ttft.mean())

The CLI is a thin layer over these functions: they take the same scenarios, write the
same run folders and raise the same errors (ScenarioError, TraceError, PluginError,
TooLarge: all ValueErrors naming the field or line) that the CLI prints as `error:`.
A result reads its records from its run folder, so `open_run(folder)` gives the same
object for a run made earlier, by the CLI or on another machine.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.records import raise_terminated
from testbed.results import RunResult, ValidationResult, open_run  # noqa: F401 - the library's names
from testbed.scenario import Scenario, ScenarioError, _format_errors
from testbed.scenario import load_scenario as _load_file

Progress = bool | Callable[[str], None] | None


class TooLarge(ValueError):
    """The run is past the size limits `testbed check` reports; force=True runs it."""


def load_scenario(source: str | Path | Mapping | Scenario,
                  overrides: Mapping[str, Any] | None = None, **fields: Any) -> Scenario:
    """A validated Scenario from a YAML file, a mapping (a scenario file's contents) or
    a Scenario; `overrides` sets dotted fields ({"workload.load": 2.0}) and keyword
    arguments set top-level ones (seeds=1, schedulers=["netkv-full", "p2c"]), as
    `--set` does. Raises ScenarioError naming the field."""
    changes = {**dict(overrides or {}), **fields}
    if isinstance(source, Scenario):
        try:
            return source.with_overrides(changes) if changes else source
        except ValueError as exc:
            raise ScenarioError(_format_errors("overrides", exc)
                                if hasattr(exc, "errors") else str(exc)) from None
    if isinstance(source, Mapping):
        data = dict(source)
        data.setdefault("name", "scenario")
        try:
            scenario = Scenario.model_validate(data)
            return scenario.with_overrides(changes) if changes else scenario
        except ValueError as exc:
            raise ScenarioError(_format_errors("scenario", exc)
                                if hasattr(exc, "errors") else str(exc)) from None
    return _load_file(source, changes or None)


def check_size(scenario: Scenario, force: bool = False, size=None) -> None:
    """Raise TooLarge when a run of `scenario` is past this machine's limits (requests,
    periodic events, memory; `testbed check` shows the estimate); `size`: its Estimate,
    when the caller has it already."""
    from testbed.estimate import available_memory, estimate

    problems = (size or estimate(scenario)).refusals(available_memory())
    if problems and not force:
        raise TooLarge(f"{scenario.name}: too large to run here: {'; '.join(problems)}. "
                       "`testbed check` shows the estimate; --force (force=True) runs it anyway")


@contextlib.contextmanager
def _bar(title: str, total: int, progress: Progress):
    """A Bar (testbed.progress) for progress=True, one that calls a callable with each
    cell's label, or one that shows nothing."""
    from testbed.progress import progress_bar

    if callable(progress):
        class Calls:
            show = step = note = staticmethod(progress)

            @staticmethod
            def live(doc: dict) -> None:
                return None

        yield Calls()
        return
    with progress_bar(title, total, disable=not progress) as bar:
        yield bar


@contextlib.contextmanager
def _sigterm_tears_down():
    """In a script's main thread, SIGTERM raises Terminated so that the fabric and the
    workers are torn down as on Ctrl-C (the CLI installs the same handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def simulate(scenario: Scenario, out: str | Path = "results", *, jobs: int | str = 1,
             dask: str | None = None, force: bool = False,
             progress: Progress = False, engine: str = "flow") -> RunResult:
    """Run every cell (sweep point x scheduler x seed) in a simulated engine: the
    flow-level model ("flow") or ns-3's packets ("ns3", docs/ns3.md).

    jobs: local processes (0: one per core; "auto": one per core as far as the runs and
    memory go, none for a small flow-model sweep); dask: a Dask scheduler address or
    local:N; progress: True for a progress bar on stderr, or a callable given each cell's
    label. Writes OUT/<name>-flowsim-<stamp>/ (ns3: <name>-ns3-<stamp>) and returns its
    RunResult."""
    return simulate_all([scenario], out, jobs=jobs, dask=dask, force=force,
                        progress=progress, engine=engine)[0]


def simulate_all(scenarios: Sequence[Scenario], out: str | Path = "results", *,
                 jobs: int | str = 1, dask: str | None = None, force: bool = False,
                 progress: Progress = False, engine: str = "flow") -> list[RunResult]:
    """`simulate` for several scenarios in a row, on one set of worker processes (they
    start once); each gets its own run folder. Every scenario's size is checked before
    the first starts."""
    from testbed.cells import count_runs
    from testbed.estimate import auto_processes, estimate
    from testbed.runner import ENGINES, run_simulated
    from testbed.sweep import Executor

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if engine == "ns3":
        from testbed.ns3sim.check import check_scenario
        from testbed.ns3sim.program import checked_program

        for scenario in scenarios:
            check_scenario(scenario)
        checked_program(on_build=progress if callable(progress) else _stderr if progress else None)
    sizes = [estimate(scenario) for scenario in scenarios]
    if jobs == "auto":
        jobs = 1 if dask else auto_processes(sizes, engine)
    if not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs must be a number of processes >= 0 or 'auto', got {jobs!r}")
    if dask and jobs != 1:
        raise ValueError("give jobs or dask, not both")
    if jobs != 1 and multiprocessing.parent_process() is not None:
        raise RuntimeError("simulate(jobs=...) was called again inside one of its worker "
                           "processes: they import your script anew, so put its work under "
                           "`if __name__ == \"__main__\":`")
    for scenario, size in zip(scenarios, sizes, strict=True):
        check_size(scenario, force, size)
    results = []
    with (Executor.dask(dask) if dask else Executor.local(jobs) if jobs != 1
          else Executor.serial()) as executor:
        for scenario in scenarios:
            with _bar(scenario.name, count_runs(scenario), progress) as bar:
                outcome = run_simulated(scenario, Path(out), bar.step, executor=executor,
                                      engine=engine)
            results.append(RunResult(outcome.folder, scenario, outcome, executor.describe()))
    return results


def _progress_note(progress: Progress, message: str) -> None:
    if callable(progress):
        progress(message)
    elif progress:
        _stderr(f"note: {message}")


def _stderr(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def emulate(scenario: Scenario, out: str | Path = "results", *, force: bool = False,
            progress: Progress = False, verbose: bool = False,
            cluster: str | Path | None = None, placement: str = "pod",
            tunnel: str = "ssh", on_fabric: Callable | None = None,
            fabrics: int | str = "auto", dask: str | None = None) -> RunResult:
    """Run every cell on packets: Mininet fat-tree, SDN controller, worker processes.
    Needs root and Open vSwitch. Writes OUT/<name>-emulation-<stamp>/ (the flow
    simulator's format plus fidelity.json) and returns its RunResult. The fabric and the
    workers are torn down on every way out (an error, Ctrl-C, SIGTERM). `cluster`: an
    inventory whose servers share the fabric and the workers (Mininet's cluster edition;
    placement and tunnel as `testbed net up --cluster`). `on_fabric(network, celldir)`:
    called once per sweep point with its fabric up, before its runs (to ping or measure
    it: `network.host("i0").cmd(...)`); what it raises ends the run, torn down.
    `fabrics`: a point's seeds on that many fabrics side by side, each in its own network
    namespace (userspace datapath), or "auto" (from the cores; `testbed emulate --help`).
    `dask`: a Dask scheduler's address; each seed then runs on a server whose worker
    offers a fabric (`dask worker ADDRESS --resources fabric=1`, as root), on its own
    fabric there, and comes back with its run folder (docs/fabric.md)."""
    from testbed.cells import count_runs, preflight
    from testbed.emulation.hooks import RunHooks
    from testbed.emulation.net import EmulatedNetwork
    from testbed.emulation.orchestrator import run_emulation
    from testbed.ns3sim.check import roce_packets
    from testbed.workers.transfer_engine import engine_available

    check_size(scenario, force)
    preflight(scenario)
    roce_packets(scenario, "emulation")
    lacking = None
    if cluster is not None and scenario.emulation.kv_transport == "mooncake":
        from testbed.remote.modules import servers_lacking

        lacking = servers_lacking(cluster, "mooncake.engine")
    engine_available(scenario, lacking)
    network = EmulatedNetwork
    if cluster is not None:
        from testbed.emulation.multi_machine import cluster_network

        network = cluster_network(cluster, placement, tunnel)
        fabrics = 1 if fabrics == "auto" else fabrics  # the cluster is the fabric
        if dask is not None:
            raise ValueError("give a cluster (one fabric over servers) or dask (a fabric "
                             "per server), not both")
        if scenario.emulation.capture:
            raise ValueError("emulation.capture records links of a fabric on this machine; "
                             "a fabric over a cluster's servers is not captured here")
    with _bar(f"{scenario.name} (packets)", count_runs(scenario), progress) as bar, \
            _sigterm_tears_down():
        def step(label: str, wall_s: float) -> None:
            if "building" in label:  # a fabric coming up is no run of its own
                bar.show(label)
            else:
                bar.step(f"{label} (~{wall_s:.0f} s + drain)")

        from testbed.validate.engines.machine_cache import load_timings, record_fabric

        hooks = RunHooks(on_step=step, on_note=bar.note, on_live=bar.live,
                         on_fabric=on_fabric)
        outcome = run_emulation(scenario, Path(out), hooks, verbose=verbose, network=network,
                                fabrics=fabrics, timings=load_timings()[0], dask=dask)
    if cluster is None and dask is None:  # this machine's fabrics: they size the next
        record_fabric(outcome.folder)
    return RunResult(outcome.folder, scenario, outcome)


_OPTION_BOUNDS = {  # what validate's numeric options may be (finite: NaN and inf refused)
    "budget_s": (1e-12, 30 * 86400.0), "emulation_budget_s": (1e-12, 30 * 86400.0),
    "target_ci": (1e-6, 1.0 - 1e-9), "repeats": (0, 100),
    "calibration_max_age_s": (0.0, 3.6e9),
}


def _ns3_takes(target_ci, emulation_budget_s) -> None:
    """The options validation on ns-3 alone refuses by name (they plan the emulation)."""
    if target_ci is not None:
        raise ValueError("target_ci: the planned half-width is the emulation's; on ns-3 "
                         "seeds are added until the claims are conclusive (--budget "
                         "bounds it), or give the seeds")
    if emulation_budget_s is not None:
        raise ValueError("emulation_budget_s: the emulation's seeds for ns-3 against "
                         "it, on both packet engines (packets='both')")


def _check_options(**given) -> None:
    from testbed.inputs import number

    for name, value in given.items():
        if value is not None:
            lo, hi = _OPTION_BOUNDS[name]
            number(value, name, lo, hi, integer=name == "repeats")
            if name == "repeats" and not isinstance(value, int):
                raise ValueError(f"repeats: expected an integer, got {value!r}")


def validate(scenario: Scenario, out: str | Path = "results", *,
             calibration: str | Path | Mapping | None = None, force: bool = False,
             progress: Progress = False, verbose: bool = False,
             target_ci: float | None = None, budget_s: float | None = None,
             reuse_calibration: bool = True, calibration_max_age_s: float = 24 * 3600.0,
             fabrics: int | str = "auto", dask: str | None = None,
             repeats: int = 0, packets: str = "auto",
             jobs: int = 0, flow_models: Sequence[str] = (),
             emulation_budget_s: float | None = None) -> ValidationResult:
    """Packets vs the flow model on the same cells and seeds (see `testbed validate
    --help`); calibration: a calibration.json (path or its contents) instead of measuring;
    otherwise this machine's cached calibration of the fabric is reused while younger
    than calibration_max_age_s (reuse_calibration=False measures anew). target_ci (gain
    interval half-width, a fraction: 0.03 is 3 points) and budget_s (wall seconds) make it
    sequential: planned first, stopped once every primary claim is resolved. fabrics: seeds
    on that many fabrics side by side, or "auto" (`testbed validate --help`); dask: seeds
    on the servers of that Dask scheduler (as `emulate`); repeats: the first seed run again
    that many times on packets, for how far packets are from themselves (on ns-3, each
    perturbed: engines/repeat.jittered). packets="emulation" needs root and Open vSwitch;
    packets="ns3": ns-3's packets instead (no root; every cell a process on `jobs` local processes,
    0: one per core, or on `dask`; calibrated on ns-3's own probes; docs/ns3.md); the
    planned half-width (target_ci) is the emulation's.
    packets="both": the emulation's validation, then ns-3 judged against the emulation on
    its seeds and the flow model against ns-3 with seeds added until conclusive (budget_s
    bounds those; validate/pipelines/three_way.py); "auto" (the default, as the CLI's):
    both where this machine can run the fabric, ns-3 otherwise. flow_models: network
    models (model/extensions/network_models.py: built-in keys, entry points, 'module:Class') judged
    beside the verdict's max-min, a row each in the section `flow_models`.
    emulation_budget_s (both engines): the emulation adds seeds, planned from its first,
    until ns-3's claims against it are conclusive or that much wall time is spent
    (validate/pipelines/twin_rounds.py); None: the scenario's seeds, and the answer says what more
    would settle them."""
    from testbed.cells import preflight
    from testbed.inputs import read_json
    from testbed.validate.pipelines.flow_models import check_models
    from testbed.validate.pipelines.pipeline import calibration_shape, check_calibration
    from testbed.validate.pipelines.pipeline import validate as run_validation

    _check_options(budget_s=budget_s, emulation_budget_s=emulation_budget_s, target_ci=target_ci,
                   repeats=repeats, calibration_max_age_s=calibration_max_age_s)
    check_size(scenario, force)
    preflight(scenario)
    if packets not in PACKET_ENGINES:
        raise ValueError(f"packets must be one of {', '.join(PACKET_ENGINES)}, got {packets!r}")
    packets, emulation_budget_s = _roce_alone(scenario, packet_engines(packets), progress,
                                              emulation_budget_s)
    models = check_models(list(flow_models)) if flow_models else []
    cal = calibration
    source = "calibration"
    if isinstance(calibration, str | Path):
        source = str(calibration)
        cal = read_json(calibration, max_bytes=64 << 20)
    if cal is not None:
        if not isinstance(cal, Mapping) or "capacity_factor" not in cal:
            raise ValueError(f"{source}: not a calibration file (no capacity_factor)")
        calibration_shape(dict(cal), source)
        if packets != "ns3":
            check_calibration(dict(cal), scenario, source)
    if packets == "ns3":
        _ns3_takes(target_ci, emulation_budget_s)
        return _validate_ns3(scenario, Path(out), dict(cal) if cal else None, progress,
                             budget_s, repeats, dask, jobs, models, force)
    both = _engines_checked(scenario, packets, target_ci, emulation_budget_s)
    title = f"{scenario.name} (validate{' on the emulation and ns-3' if both else ''})"
    started = time.monotonic()
    with _bar(title, 1, progress) as bar, _sigterm_tears_down(), \
            _twin_looks(scenario, emulation_budget_s, bar, dask, jobs) as (emulated, looks):
        folder = run_validation(emulated, Path(out), dict(cal) if cal else None,
                                lambda label, _wall: bar.show(label), verbose=verbose,
                                on_live=bar.live, target_ci=target_ci,
                                budget_s=None if both else budget_s,
                                use_cache=reuse_calibration,
                                cache_max_age_s=calibration_max_age_s, on_note=bar.note,
                                fabrics=fabrics, dask=dask, repeats=repeats,
                                after_round=looks)
        if both:
            _ns3_beside(scenario, folder, bar, budget_s, dask, jobs, repeats, started)
        if models:
            _flow_models(folder, models, bar, dask, jobs)
    return ValidationResult(folder)


def _roce_alone(scenario, packets: str, progress, emulation_budget_s):
    """(packets, emulation budget): RoCE runs on ns-3 alone, said; refused on the emulation;
    and an emulation's KV transport must be installed here."""
    from testbed.ns3sim.check import roce_packets
    from testbed.workers.transfer_engine import engine_available

    packets, note = roce_packets(scenario, packets)
    if packets != "ns3":
        engine_available(scenario)
    if note:
        _progress_note(progress, note)
        return packets, None
    return packets, emulation_budget_s


PACKET_ENGINES = ("auto", "emulation", "ns3", "both")
NS3_BUDGET_S = 1800.0  # ns-3's default budget; on both engines, the whole validation's
NS3_LEAST_S = 600.0  # what ns-3's rounds keep however long the emulation took


def ns3_share_s(budget_s: float | None, elapsed_s: float) -> float:
    """What a validation on both engines leaves ns-3's rounds of its budget (the whole
    validation's) once the emulation's part took `elapsed_s`."""
    whole = NS3_BUDGET_S if budget_s is None else budget_s
    return max(NS3_LEAST_S, whole - elapsed_s)


def packet_engines(packets: str) -> str:
    """"auto": both packet engines where this machine can run the fabric (root, Mininet,
    Open vSwitch), ns-3 alone otherwise."""
    if packets != "auto":
        return packets
    from testbed.emulation.net import fabric_unavailable

    return "ns3" if fabric_unavailable() else "both"


@contextlib.contextmanager
def _twin_looks(scenario, budget_s: float | None, bar, dask, jobs):
    """(the scenario the emulation runs, its looks): with a budget, seeds up to
    twin_rounds.MAX_SEEDS judged after each (ns-3 at its placements on this machine's
    cores, or `dask`); without, the scenario as it is and no looks."""
    if budget_s is None:
        yield scenario, None
        return
    from testbed.sweep import Executor
    from testbed.validate.pipelines.twin_rounds import MAX_SEEDS, TwinLooks

    planned = scenario.with_overrides({"seeds": max(scenario.seeds, MAX_SEEDS)})
    with Executor.dask(dask) if dask else Executor.local(jobs) as executor:
        yield planned, TwinLooks(planned, budget_s, executor, bar.note)


def _engines_checked(scenario, packets: str, target_ci, emulation_budget_s) -> bool:
    """Whether both packet engines run, the options checked against it."""
    if packets == "both":
        from testbed.ns3sim.check import check_scenario

        if target_ci is not None:
            raise ValueError("target_ci: the emulation's planned width; on both engines the "
                             "emulation runs the scenario's seeds and ns-3 adds seeds until "
                             "the flow model's claims are conclusive (budget_s bounds it)")
        check_scenario(scenario)
        return True
    if emulation_budget_s is not None:
        raise ValueError("emulation_budget_s: the emulation's seeds for ns-3 against it, "
                         "on both packet engines (packets='both')")
    return False


def _ns3_beside(scenario, folder: Path, bar, budget_s, dask, jobs, repeats: int = 0,
                started: float | None = None) -> None:
    """ns-3's part of a validation on both engines: the whole validation (since `started`)
    keeps to `budget_s` (default NS3_BUDGET_S), at least NS3_LEAST_S of it ns-3's."""
    from testbed.sweep import Executor
    from testbed.validate.pipelines import three_way

    if started is not None:
        budget_s = ns3_share_s(budget_s, time.monotonic() - started)

    with Executor.dask(dask) if dask else Executor.local(jobs) as executor:
        three_way.run(scenario, folder, executor, lambda label, _wall: bar.show(label),
                      bar.note, budget_s, repeats)


def _flow_models(folder: Path, models: list[str], bar, dask, jobs, executor=None) -> None:
    from testbed.sweep import Executor
    from testbed.validate.pipelines.judge_folder import with_flow_models

    if executor is not None:
        with_flow_models(folder, models, executor, lambda label, _wall: bar.show(label))
        return
    with Executor.dask(dask) if dask else Executor.local(jobs) as executor:
        with_flow_models(folder, models, executor, lambda label, _wall: bar.show(label))


def _validate_ns3(scenario, out: Path, cal, progress, budget_s, repeats, dask,
                  jobs, models: list[str], force: bool = False) -> ValidationResult:
    from testbed.ns3sim.check import check_scenario
    from testbed.sweep import Executor
    from testbed.validate.pipelines.ns3_pipeline import validate_ns3

    check_scenario(scenario)
    executor = Executor.dask(dask) if dask else Executor.local(jobs)
    with _bar(f"{scenario.name} (validate on ns-3)", 1, progress) as bar, executor:
        folder = validate_ns3(scenario, out, cal, executor,
                              lambda label, _wall: bar.show(label), on_note=bar.note,
                              budget_s=budget_s, repeats=repeats, force=force)
        if models:
            _flow_models(folder, models, bar, dask, jobs, executor)
    return ValidationResult(folder)
