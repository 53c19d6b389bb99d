"""`testbed validate`: the same scenario and seeds on packets and in the flow model.

1. Emulate every cell (with a calibration of the fabric first, unless one is given).
2. Simulate the same cells in the flow model, before and after calibration, and once
   more with the TCP terms (network.flow_model: tcp, with the replica's equivalents:
   testbed/model/tcp.py). The flow model follows the ECMP the fabric realises:
   per-transfer scenarios run per-pair (switches hash addresses, so a pair's transfers
   share one path on packets). Once more with the TCP terms, forced to the packets'
   own placements (divergence.py): what is left of the gap is not scheduling.
3. Replay the emulation's own transfers (start, size, endpoints, path) through the
   flow model, before and after calibration and with the TCP terms: network-model error
   alone, without scheduling divergence.
4. Judge with confidence: bootstrap 95% intervals on every error, per-scheduler TTFT
   verdicts from the requests both engines served, ranking agreement per seed; runs the
   fidelity monitor flagged are left out of the verdict and listed; transfers below the
   validity floor (testbed/validate/judging/validity.py) are reported apart; the paper's claims
   (gains over RR and CLA*) on both engines (claims.py).
5. Write report.md, comparison.json and plots/*.png; summary.py says the last lines.

With a target width or a budget the packets run in planned rounds and stop early
(sequential_plan.py, sequential.py); the calibration and this machine's phase times are cached
(machine_cache.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from testbed.clock import RunClock
from testbed.inputs import read_json
from testbed.metrics import percentile
from testbed.records import PARTIAL, atomic_write, kept_if_recorded, read_csv, stamp, write_json
from testbed.runner import run_simulated
from testbed.validate.comparison import beside
from testbed.validate.comparison.document import write_comparison
from testbed.validate.comparison.sections import build_document, cells_of
from testbed.validate.engines import machine_cache, repeat
from testbed.validate.engines.contention import with_probe_fits
from testbed.validate.engines.flow_match import flow_scenario
from testbed.validate.judging import divergence


def calibration_shape(cal: dict, source: str) -> None:
    """A calibration document given by hand: every figure the flow model takes from it a
    finite number where it belongs, named by field when it is not."""
    from testbed.inputs import InputError, number

    if not isinstance(cal.get("capacity_factor"), dict | int | float):
        raise InputError(f"{source}: capacity_factor: expected a number per tier")
    factors = cal["capacity_factor"]
    for tier, value in (factors.items() if isinstance(factors, dict) else [("", factors)]):
        number(value, f"{source}: capacity_factor{'.' if tier else ''}{tier}", 1e-6, 10)
    for key, lo, hi in (("scale", 1e-12, 1.0), ("time_dilation", 1e-3, 1e3),
                        ("payload_share", 1e-6, 1.0)):
        if key in cal:
            number(cal[key], f"{source}: {key}", lo, hi)
    for section in ("tcp", "tiers"):
        if not isinstance(cal.get(section, {}), dict):
            raise InputError(f"{source}: {section}: expected an object")
    for key, value in (cal.get("tcp") or {}).items():
        if not isinstance(value, list | dict):
            number(value, f"{source}: tcp.{key}")


def check_calibration(cal: dict, scenario, source: str = "calibration") -> None:
    """A calibration holds for the scale and dilation it was measured at, no other."""
    emu = scenario.emulation
    for key, want in (("scale", emu.scale), ("time_dilation", emu.time_dilation)):
        got = cal.get(key)
        if got is None or abs(float(got) - want) > 1e-9 * max(1.0, want):
            raise ValueError(f"{source}: measured at {key} {got}, but this run uses "
                             f"emulation.{key} {want}; calibrate again at this setting "
                             "(testbed calibrate) or leave --calibration out")


def validate(scenario, out_root: Path, calibration: dict | None = None,
             on_step: Callable[[str, float], None] | None = None, verbose: bool = False,
             on_live: Callable[[dict], None] | None = None, target_ci: float | None = None,
             budget_s: float | None = None, use_cache: bool = True,
             cache_max_age_s: float = machine_cache.DEFAULT_MAX_AGE_S,
             on_note: Callable[[str], None] | None = None,
             fabrics: int | str = "auto", dask: str | None = None, repeats: int = 0,
             after_round=None) -> Path:
    """Packets, then the flow model, then the report. With `target_ci` or `budget_s` it is
    sequential (testbed/validate/sequential_plan.py): planned from a flow-model pilot before the
    fabric starts, and stopped after the round where every primary claim is resolved.
    `on_note(line)` gets the plan, the calibration's source and a line per look;
    `fabrics`: how many fabrics run seeds side by side (emulation/lanes.py), or "auto";
    `dask`: a Dask scheduler whose fabric workers run the seeds, one per server at a time
    (emulation/servers.py); this machine then calibrates only. `repeats`: run the first
    seed again that many times on packets (RR alone where it is scheduled) to measure how
    far packets are from themselves (validate/engines/repeat.py). `after_round`: the seeds' looks
    of ns-3 against the emulation (twin_rounds.TwinLooks)."""
    from testbed.emulation.hooks import RunHooks
    from testbed.emulation.orchestrator import run_emulation
    from testbed.validate.engines.fabric_probes import calibrate
    from testbed.validate.pipelines import sequential_plan

    note = on_note or (lambda _line: None)
    started = time.monotonic()
    looks = basis = None
    sequential_run = target_ci is not None or budget_s is not None
    lanes = _lanes(scenario, fabrics, dask, sequential_plan.MAX_ROUNDS if sequential_run else None,
                   note)
    if calibration is not None:
        check_calibration(calibration, scenario)
    elif use_cache:
        calibration = _cached_calibration(scenario, 1 if dask else lanes, cache_max_age_s, note)
    if sequential_run:
        plan, basis = sequential_plan.make_plan(scenario, target_ci or 1e-3, budget_s or math.inf,
                                       calibrated=calibration is not None, lanes=lanes)
        note(sequential_plan.describe_plan(plan, basis))
        lanes = plan.lanes
        scenario = sequential_plan.planned_scenario(scenario, plan.rounds * lanes, plan.window_s)
        looks = sequential_plan.Looks(scenario, plan, started, basis["timings"]["judge_s"],
                             on_look=note)
    folder = out_root / f"{scenario.name}-validate-{stamp()}"
    folder.mkdir(parents=True)
    with kept_if_recorded(folder):  # a failure before the first run leaves no folder
        atomic_write(folder / PARTIAL, "validation started; not finished\n")
        atomic_write(folder / "scenario.yaml",
                     yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
        measured: list[dict] = []
        phases: dict[str, float] = {}

        def on_fabric(network, _celldir) -> None:
            phases.setdefault("fabric_s", time.monotonic() - started)
            if calibration is None and not measured:
                t = time.monotonic()
                measured.append(calibrate(network, lambda label: on_step and on_step(label, 0.0)))
                phases["calibration_s"] = time.monotonic() - t
                if use_cache:
                    machine_cache.save_calibration(scenario, measured[0], split=network.split)
            if looks is not None:
                cal = calibration or measured[0]
                looks.flow_scenario = flow_scenario(scenario, _factors(cal), cal.get("tcp", {}))

        if (lanes > 1 or dask) and calibration is not None:  # no fabric here is needed
            if looks is not None:
                looks.flow_scenario = flow_scenario(scenario, _factors(calibration),
                                                calibration.get("tcp", {}))
            hook = None
        else:
            hook = on_fabric
        emu = run_emulation(scenario, folder, RunHooks(
            on_step=on_step, on_note=note, on_live=on_live, on_fabric=hook,
            after_round=looks or after_round), verbose=verbose, fabrics=lanes, dask=dask,
            timings=machine_cache.load_timings()[0])
        _repeats(scenario, folder, repeats, on_step, note, verbose)
        cal = calibration or measured[0]
        write_json(folder / "calibration.json", cal)
        scenario = _seeds_looked_at(scenario, folder, None if looks else after_round)
        _judge_and_record(scenario, folder, emu.folder, cal, looks, basis, phases, started,
                          on_step, this_machine=dask is None)
    return folder


def _repeats(scenario, folder: Path, repeats: int, on_step, note, verbose: bool) -> None:
    """The first seed again on packets, `repeats` times (validate/engines/repeat.py)."""
    from testbed.emulation.hooks import RunHooks
    from testbed.emulation.orchestrator import run_emulation

    again = repeat.repeat_scenario(scenario)
    for i in range(repeats):
        note(f"packets again ({i + 1} of {repeats}): {', '.join(again.schedulers)}, seed 1")
        run_emulation(again, folder / repeat.REPEATS, RunHooks(on_step=on_step, on_note=note),
                      verbose=verbose)


def _seeds_looked_at(scenario, folder: Path, looks):
    """Another judge's looks (twin_rounds.TwinLooks) stopped the emulation's seeds: the
    judged scenario has the seeds it ran, its record beside it (none: as it is)."""
    if looks is None:
        return scenario
    write_json(folder / "twin_rounds.json", looks.record())
    judged = scenario.with_overrides({"seeds": max(1, looks.seeds_run())})
    atomic_write(folder / "scenario.yaml",
                 yaml.safe_dump(judged.model_dump(mode="json"), sort_keys=False))
    return judged


def _lanes(scenario, fabrics: int | str, dask: str | None, rounds_at_most: int | None,
           note: Callable[[str], None]) -> int:
    """Seeds a round runs at once: one per Dask server, or the fabrics side by side."""
    if dask is not None:
        from testbed.emulation.servers import count_servers

        lanes = count_servers(dask)
        note(f"{lanes} server(s) at {dask}: one seed each per round")
        return lanes
    lanes, why = side_by_side(scenario, fabrics, rounds_at_most)
    if fabrics != 1:
        note(f"{lanes} fabric(s) side by side ({why})")
    return lanes


def _cached_calibration(scenario, count: int, max_age_s: float,
                        note: Callable[[str], None]) -> dict | None:
    """This machine's calibration of the fabric, measured on a fabric split as this run's
    calibration fabric will be (None: measure it)."""
    from testbed.emulation.lanes import fabric_split, lane_daemons

    point_scenario = scenario.points()[0][1]
    daemons = lane_daemons(point_scenario, machine_cache.load_timings()[0], count)
    split = fabric_split(point_scenario, count, daemons)
    calibration, why = machine_cache.load_calibration(scenario, max_age_s, split=split)
    note(why)
    return calibration


def _judge_and_record(scenario, folder: Path, emu_folder: Path, cal: dict, looks, basis,
                      phases: dict, started: float, on_step, this_machine: bool) -> None:
    """After the packets: the judged scenario (the seeds a sequential run ran), the
    judging, this machine's phase times, and the folder finished."""
    judged = scenario
    if looks is not None:
        judged = scenario.with_overrides({"seeds": max(1, looks.seeds_run())})
        atomic_write(folder / "scenario.yaml",
                     yaml.safe_dump(judged.model_dump(mode="json"), sort_keys=False))
    t = time.monotonic()
    if looks is not None:  # judge() reads it: the level, and the report's plan and looks
        write_json(folder / "sequential.json", looks.record(t - started))
    judge(judged, folder, emu_folder, cal, on_step)
    phases["judge_s"] = time.monotonic() - t
    if looks is not None:
        write_json(folder / "sequential.json",
                   {**looks.record(t - started), "total_wall_s": time.monotonic() - started})
    phases.update(run_overheads(emu_folder, scenario, basis["drain_s"] if looks else None))
    machine_cache.record_timings(phases)
    if this_machine:  # this machine's fabrics: what they kept busy and carried
        machine_cache.record_fabric(emu_folder)
    write_json(folder / "wall.json", {"total_s": time.monotonic() - started, "phases": phases})
    (folder / PARTIAL).unlink(missing_ok=True)


def _factors(cal: dict) -> dict[int, float]:
    return {int(k): float(v) for k, v in cal["capacity_factor"].items()}


def side_by_side(scenario, fabrics: int | str, seeds: int | None) -> tuple[int, str]:
    """How many fabrics run seeds side by side (lanes.lane_count) for `seeds` seeds (the
    scenario's when None), from this machine's cores and what one fabric run alone here
    was measured to keep busy (lanes.fabric_need, from the cache's timings)."""
    from testbed.emulation.lanes import plan_lanes

    point_scenario = scenario.points()[0][1]
    return plan_lanes(fabrics, point_scenario, machine_cache.load_timings()[0],
                      seeds or point_scenario.seeds)[:2]


def run_overheads(emu_folder: Path, scenario,
                  pilot_drain: dict[str, float] | None) -> dict[str, float]:
    """From the runs' records: the median worker start (workers.json written -> the run's
    t0) and stop (the last request done -> the run's last record written: the workers
    stopped, the packets judged for fidelity, the records out; the next run starts only
    then), wall seconds; with the
    pilot's drain per scheduler, the packets' drains (last request done after the window,
    modelled) over the pilot's, summed over the runs: the planner's drain_factor. Summed,
    not a median of ratios: a round costs the sum of its runs' drains, and one run's
    ratio swings widely (0.4-4.6 on one demo) with where a backlog happened to form."""
    dilation = scenario.emulation.time_dilation
    end = scenario.workload.warmup_s + scenario.workload.measure_s
    starts, stops, drains, pilots = [], [], [], []
    for key, cell in cells_of(emu_folder).items():
        try:
            router = read_json((cell / "router.json"), object)
            done = [float(r["done"]) for r in read_csv(cell / "requests.csv", ("done",))
                    if r.get("done") not in (None, "")]
        except (OSError, ValueError, KeyError):
            continue
        t0 = float(router["t0"])
        starts.append(t0 - (cell / "workers.json").stat().st_mtime)
        if done:
            stops.append(_run_end(cell) - RunClock(t0, dilation).wall(max(done)))
            want = (pilot_drain or {}).get(key.split("/")[1])
            if want and want > 0.5:
                drains.append(max(0.0, max(done) - end))
                pilots.append(want)
    out = {}
    if starts:
        out["worker_start_s"] = percentile(starts, 50)
    if stops:
        out["worker_stop_s"] = max(0.0, percentile(stops, 50))
    if pilots:
        out["drain_factor"] = sum(drains) / sum(pilots)
    return out


def _run_end(cell: Path) -> float:
    """When a run's last record was written (wall clock)."""
    return max(f.stat().st_mtime for f in (cell / name for name in
                                           ("router.json", "summary.json", "fidelity.json"))
               if f.exists())


def judge(scenario, folder: Path, emu_folder: Path, cal: dict,
          on_step: Callable[[str, float], None] | None = None, executor=None) -> dict:
    """Everything after the packets: the flow model's runs, the comparisons, the report.
    Needs no root, so a validation can be judged again under a changed flow model.
    `executor` (testbed.sweep): where the flow model's runs and draws go (here, serially,
    by default); the document is the same either way."""
    factors = _factors(cal)
    cal = with_probe_fits(scenario, cal)
    fit = cal.get("tcp", {})
    if on_step:
        on_step("flow model (uncalibrated, calibrated, with TCP terms, forced to the packets' "
                "placements) and replays", 0.0)
    on = {"executor": executor}
    flows = {"uncalibrated": run_simulated(flow_scenario(scenario), folder, **on).folder,
             "calibrated": run_simulated(flow_scenario(scenario, factors), folder, **on).folder,
             "tcp": run_simulated(flow_scenario(scenario, factors, fit), folder, **on).folder}
    # the same model made to place every request where the packets did
    flows["tcp_forced"] = run_simulated(flow_scenario(scenario, factors, fit), folder,
                                      follow=divergence.recorded(cells_of(emu_folder)),
                                      **on).folder
    flows.update(beside.engine_runs(scenario, factors, fit, folder, executor))
    seq_file = folder / "sequential.json"
    sequential = read_json(seq_file, object) if seq_file.exists() else None
    return publish(folder, build_document(scenario, emu_folder, flows, cal, factors,
                                          sequential, executor))


def publish(folder: Path, doc: dict) -> dict:
    """comparison.json (checked against its model), the plots and report.md."""
    from testbed.validate.report.plots import write_plots
    from testbed.validate.report.render import render_validation

    doc = write_comparison(folder / "comparison.json", doc)
    plots = write_plots(doc, folder / "plots")
    atomic_write(folder / "report.md", render_validation(doc, plots, folder))
    return doc
