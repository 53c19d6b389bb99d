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
   validity floor (testbed/validate/validity.py) are reported apart; the paper's claims
   (gains over RR and CLA*) on both engines (claims.py).
5. Write report.md, comparison.json and plots/*.png; summary.py says the last lines.

With a target width or a budget the packets run in planned rounds and stop early
(rounds.py, sequential.py); the calibration and this machine's phase times are cached
(machine_cache.py).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.clock import RunClock
from testbed.metrics import aggregate, percentile, tcp_stalls
from testbed.records import PARTIAL, atomic_write, read_csv, stamp, write_json
from testbed.runner import run_flowsim
from testbed.topologies.routing import ECMP_MODES, packet_ecmp
from testbed.validate import (
    arrival,
    beside,
    compare,
    divergence,
    machine_cache,
    repeat,
    stats,
    trajectory,
    validity,
)
from testbed.validate.contention import with_probe_fits
from testbed.validate.document import write_comparison
from testbed.validate.replay import replay_cells, whole_pairs
from testbed.validate.summary import (
    claim_targets,
    divergence_targets,
    targets,
    with_intervals,
)
from testbed.validate.twin import flow_twin, replay_twin
from testbed.validate.verdicts import faithful_cells, point_claims, seed_rankings, ttft_verdicts


def check_calibration(cal: dict, scenario, source: str = "calibration") -> None:
    """A calibration holds for the scale and dilation it was measured at, no other."""
    emu = scenario.emulation
    for key, want in (("scale", emu.scale), ("time_dilation", emu.time_dilation)):
        got = cal.get(key)
        if got is None or abs(float(got) - want) > 1e-9 * max(1.0, want):
            raise ValueError(f"{source}: measured at {key} {got}, but this run uses "
                             f"emulation.{key} {want}; calibrate again at this setting "
                             "(testbed calibrate) or leave --calibration out")


TCP_ABLATIONS = {
    "without the tail": {"network.tcp.tail_rtts": 0},
    "without slow start": {"network.tcp.init_cwnd": 1e6},
    "with RTT-weighted shares (exponent 1)": {"network.tcp.rtt_exponent": 1.0},
    "without the shard spread": {"network.tcp.shard_spread": 0.0},
}


def cells_of(folder: Path) -> dict[str, Path]:
    return {str(p.parent.relative_to(folder / "cells")): p.parent
            for p in sorted((folder / "cells").glob("*/*/seed*/summary.json"))}


def transfer_pairs(ref_cells: dict[str, Path], model_rows: dict[str, list[dict]]) -> list:
    pairs = []
    for key, cell in ref_cells.items():
        if key in model_rows:
            got, _ = compare.match_transfers(read_csv(cell / "transfers.csv"), model_rows[key])
            pairs.extend(got)
    return pairs


def per_point(cells: dict[str, Path]) -> dict[str, dict[str, dict]]:
    """point -> scheduler -> seeds' aggregate of summary.json (+ the fidelity verdicts)."""
    seeds: dict[str, dict[str, list[dict]]] = {}
    for key, cell in cells.items():
        point, sched, _ = key.split("/")
        seeds.setdefault(point, {}).setdefault(sched, []).append(
            json.loads((cell / "summary.json").read_text()))
    out: dict[str, dict[str, dict]] = {}
    for point, by in seeds.items():
        out[point] = {}
        for sched, summaries in by.items():
            agg = aggregate(summaries)
            verdicts = [s.get("fidelity") for s in summaries if s.get("fidelity")]
            if verdicts:
                agg["fidelity"] = ("faithful" if all(v == "faithful" for v in verdicts)
                                   else "unfaithful")
            out[point][sched] = agg
    return out


def engine_comparison(emu: dict, flow: dict) -> dict:
    return {point: {"metrics": compare.metric_comparison(emu[point], flow[point]),
                    "ranking": compare.ranking_agreement(emu[point], flow[point])}
            for point in sorted(set(emu) & set(flow))}


def validate(scenario, out_root: Path, calibration: dict | None = None,
             on_step: Callable[[str, float], None] | None = None, verbose: bool = False,
             on_live: Callable[[dict], None] | None = None, target_ci: float | None = None,
             budget_s: float | None = None, use_cache: bool = True,
             cache_max_age_s: float = machine_cache.DEFAULT_MAX_AGE_S,
             on_note: Callable[[str], None] | None = None,
             fabrics: int | str = "auto", dask: str | None = None, repeats: int = 0) -> Path:
    """Packets, then the flow model, then the report. With `target_ci` or `budget_s` it is
    sequential (testbed/validate/rounds.py): planned from a flow-model pilot before the
    fabric starts, and stopped after the round where every primary claim is resolved.
    `on_note(line)` gets the plan, the calibration's source and a line per look;
    `fabrics`: how many fabrics run seeds side by side (emulation/lanes.py), or "auto";
    `dask`: a Dask scheduler whose fabric workers run the seeds, one per server at a time
    (emulation/servers.py); this machine then calibrates only. `repeats`: run the first
    seed again that many times on packets (RR alone where it is scheduled) to measure how
    far packets are from themselves (validate/repeat.py)."""
    from testbed.emulation.orchestrator import RunHooks, run_emulation
    from testbed.validate import rounds
    from testbed.validate.calibrate import calibrate

    note = on_note or (lambda _line: None)
    started = time.monotonic()
    looks = basis = None
    sequential_run = target_ci is not None or budget_s is not None
    lanes = _lanes(scenario, fabrics, dask, rounds.MAX_ROUNDS if sequential_run else None,
                   note)
    if calibration is not None:
        check_calibration(calibration, scenario)
    elif use_cache:
        calibration = _cached_calibration(scenario, 1 if dask else lanes, cache_max_age_s, note)
    if sequential_run:
        plan, basis = rounds.make_plan(scenario, target_ci or 1e-3, budget_s or math.inf,
                                       calibrated=calibration is not None, lanes=lanes)
        note(rounds.describe_plan(plan, basis))
        lanes = plan.lanes
        scenario = rounds.planned_scenario(scenario, plan.rounds * lanes, plan.window_s)
        looks = rounds.Looks(scenario, plan, started, basis["timings"]["judge_s"],
                             on_look=note)
    folder = out_root / f"{scenario.name}-validate-{stamp()}"
    folder.mkdir(parents=True)
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
            looks.flow_scenario = flow_twin(scenario, _factors(cal), cal.get("tcp", {}))

    if (lanes > 1 or dask) and calibration is not None:  # no fabric here is needed
        if looks is not None:
            looks.flow_scenario = flow_twin(scenario, _factors(calibration),
                                            calibration.get("tcp", {}))
        hook = None
    else:
        hook = on_fabric
    hooks = RunHooks(on_step=on_step, on_note=note, on_live=on_live, on_fabric=hook,
                     after_round=looks)
    emu = run_emulation(scenario, folder, hooks, verbose=verbose, fabrics=lanes, dask=dask,
                        timings=machine_cache.load_timings()[0])
    again = repeat.repeat_scenario(scenario)
    for i in range(repeats):
        note(f"packets again ({i + 1} of {repeats}): {', '.join(again.schedulers)}, seed 1")
        run_emulation(again, folder / repeat.REPEATS, RunHooks(on_step=on_step, on_note=note),
                      verbose=verbose)
    cal = calibration or measured[0]
    write_json(folder / "calibration.json", cal)
    _judge_and_record(scenario, folder, emu.folder, cal, looks, basis, phases, started,
                      on_step, this_machine=dask is None)
    return folder


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

    cell = scenario.cells()[0][1]
    split = fabric_split(cell, count, lane_daemons(cell, machine_cache.load_timings()[0], count))
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

    cell = scenario.cells()[0][1]
    return plan_lanes(fabrics, cell, machine_cache.load_timings()[0], seeds or cell.seeds)[:2]


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
            router = json.loads((cell / "router.json").read_text())
            done = [float(r["done"]) for r in read_csv(cell / "requests.csv")
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
          on_step: Callable[[str, float], None] | None = None) -> dict:
    """Everything after the packets: the flow model's runs, the comparisons, the report.
    Needs no root, so a validation can be judged again under a changed flow model."""
    factors = _factors(cal)
    cal = with_probe_fits(scenario, cal)
    fit = cal.get("tcp", {})
    if on_step:
        on_step("flow model (uncalibrated, calibrated, with TCP terms, forced to the packets' "
                "placements) and replays", 0.0)
    flows = {"uncalibrated": run_flowsim(flow_twin(scenario), folder).folder,
             "calibrated": run_flowsim(flow_twin(scenario, factors), folder).folder,
             "tcp": run_flowsim(flow_twin(scenario, factors, fit), folder).folder}
    # the same model made to place every request where the packets did
    flows["tcp_forced"] = run_flowsim(flow_twin(scenario, factors, fit), folder,
                                      follow=divergence.recorded(cells_of(emu_folder))).folder
    flows.update(beside.engine_runs(scenario, factors, fit, folder))
    seq_file = folder / "sequential.json"
    sequential = json.loads(seq_file.read_text()) if seq_file.exists() else None
    return publish(folder, build_document(scenario, emu_folder, flows, cal, factors,
                                          sequential))


def publish(folder: Path, doc: dict) -> dict:
    """comparison.json (checked against its model), the plots and report.md."""
    from testbed.validate.plots import write_plots
    from testbed.validate.render import render_validation

    doc = write_comparison(folder / "comparison.json", doc)
    plots = write_plots(doc, folder / "plots")
    atomic_write(folder / "report.md", render_validation(doc, plots, folder))
    return doc


def judge_again(folder: Path) -> dict:
    """Judge a finished validation folder anew (its packets run and calibration kept; the
    flow model's runs made again beside the old ones)."""
    from testbed.scenario import Scenario

    folder = Path(folder)
    if (folder / PARTIAL).exists():
        raise ValueError(f"{folder}: this validation did not finish (PARTIAL)")
    try:
        raw = yaml.safe_load((folder / "scenario.yaml").read_text(encoding="utf-8"))
        cal = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ValueError(f"{folder}: not a validation folder ({exc})") from None
    # the packets' run: the emulation's, or ns-3's (validate --packets ns3)
    packets = sorted(folder.glob("*-emulation-*")) or sorted(folder.glob("*-ns3-*"))
    if not packets or not isinstance(raw, dict) or "capacity_factor" not in cal:
        raise ValueError(f"{folder}: not a validation folder (needs scenario.yaml, "
                         "calibration.json and the packets' run folder)")
    return judge(Scenario.model_validate(raw), folder, packets[-1], cal)


@dataclass(frozen=True)
class Judging:
    """What every section of a validation's document is computed from: the packets' cells
    (all, and the faithful ones), the flow model's, their transfers and the replays."""

    scenario: object
    emu_folder: Path
    cal: dict
    factors: dict[int, float]
    all_emu: dict[str, Path]
    emu_cells: dict[str, Path]
    flagged: list[str]
    flow_cells: dict[str, dict[str, Path]]
    loads: dict[str, dict[str, list[dict]]]
    tcp_twin: object
    replayer: object
    replays: dict[str, dict]
    by_tier: dict


def _judging(scenario, emu_folder: Path, flows: dict[str, Path], cal: dict,
             factors: dict[int, float]) -> Judging:
    all_emu = cells_of(emu_folder)
    emu_cells, flagged = faithful_cells(all_emu)
    flow_cells = {name: cells_of(f) for name, f in flows.items()}
    loads = {name: {k: read_csv(c / "transfers.csv") for k, c in cells.items()}
             for name, cells in flow_cells.items()}
    tcp_twin = flow_twin(scenario, factors, cal.get("tcp", {}))
    replayer = replay_twin(scenario, factors, cal.get("tcp", {}))
    replays = {"replay_uncalibrated": replay_cells(scenario, all_emu, None),
               "replay_calibrated": replay_cells(scenario, all_emu, factors),
               "replay_tcp": replay_cells(replayer, all_emu, factors)}
    return Judging(scenario, emu_folder, cal, factors, all_emu, emu_cells, flagged, flow_cells,
                   loads, tcp_twin, replayer, replays, validity.floors(tcp_twin, factors))


def _transfer_sections(j: Judging) -> tuple[dict, dict, dict]:
    """The per-transfer sections (errors per shard and whole, above and below the validity
    floor, stalls, arrival order, the replica's validity, each TCP term left out), and the
    whole-transfer pairs and those above the floor that the targets read."""
    # each TCP term on its own: the full model less one term (or plus RTT weighting)
    ablations = {name: whole_pairs(j.all_emu, replay_cells(j.replayer.with_overrides(over),
                                                           j.all_emu, j.factors))
                 for name, over in TCP_ABLATIONS.items()}
    # per-transfer errors: every emulated run (replay judges the network model on what
    # the packets did, faithful or not is in the fidelity section); engines: faithful only
    models = {**j.replays, "engines_uncalibrated": j.loads["uncalibrated"],
              "engines_calibrated": j.loads["calibrated"], "engines_tcp": j.loads["tcp"]}
    runs = {name: j.all_emu if name.startswith("replay") else j.emu_cells for name in models}
    shard_pairs = {name: transfer_pairs(runs[name], rows) for name, rows in models.items()}
    whole = {name: whole_pairs(runs[name], rows) for name, rows in models.items()}
    above = {name: [p for p in ps if validity.above_floor(p.tier, p.size_bytes, j.by_tier)]
             for name, ps in whole.items()}
    below = {name: [p for p in ps if not validity.above_floor(p.tier, p.size_bytes, j.by_tier)]
             for name, ps in whole.items()}
    emu_rows = [r for c in j.all_emu.values() for r in read_csv(c / "transfers.csv")]
    whole_rows = [r for c in j.all_emu.values()
                  for r in compare.whole_transfers(read_csv(c / "transfers.csv"))]
    emulation = j.scenario.emulation
    return {
        "transfers": {name: compare.error_summary(p) for name, p in shard_pairs.items()},
        "stalls": {"connections": tcp_stalls(emu_rows),
                   "replay_tcp": compare.stall_split(shard_pairs["replay_tcp"])},
        "arrival": arrival.by_arrival(j.all_emu, j.replays["replay_tcp"], j.by_tier),
        "whole_transfers": {name: with_intervals(p) for name, p in whole.items()},
        "whole_above_floor": {name: with_intervals(p) for name, p in above.items()},
        "whole_below_floor": {name: compare.error_summary(p) for name, p in below.items()},
        "transfer_samples": {name: [[p.reference_s, p.model_s, p.tier, p.size_bytes]
                                    for p in ps] for name, ps in shard_pairs.items()},
        "validity": {
            "tolerance": validity.TOLERANCE,
            "tiers": {str(t): v for t, v in j.by_tier.items()},
            "segments_per_shard": validity.segment_profile(
                emu_rows, emulation.scale, emulation.frame_bytes),
            "shard_spread": _spread(emu_rows),
            "model_shard_spread": _spread([r for rows in j.replays["replay_tcp"].values()
                                           for r in rows]),
            "clear_90": validity.scale_to_clear(
                j.tcp_twin, [float(r["bytes"]) for r in whole_rows],
                [int(r["tier"]) for r in whole_rows], j.factors),
        },
        "tcp_ablation": {name: with_intervals(p) for name, p in ablations.items()},
    }, whole, above


def _engine_sections(j: Judging, verdicts: dict) -> dict:
    """Both engines free, per scheduler: TTFT and transfer time, the verdicts, the
    rankings per seed, tier shares and each run's fidelity. Tables show every run (the
    report marks unfaithful ones); the verdicts use faithful runs only."""
    emu_pts = per_point(j.all_emu)
    pts = {name: per_point(cells) for name, cells in j.flow_cells.items()}
    return {
        "uncalibrated": engine_comparison(emu_pts, pts["uncalibrated"]),
        "calibrated": engine_comparison(emu_pts, pts["calibrated"]),
        "tcp": engine_comparison(emu_pts, pts["tcp"]),
        "ttft_verdicts": verdicts,
        "seed_rankings": {name: seed_rankings(j.emu_cells, j.flow_cells[name])
                          for name in ("calibrated", "tcp")},
        "tiers": {point: {sched: {"packets": emu_pts[point][sched].get("tier_share", {}),
                                  "flow": pts["tcp"].get(point, {}).get(sched, {}).get(
                                      "tier_share", {})}
                          for sched in emu_pts[point]} for point in emu_pts},
        "fidelity": {point: {sched: s.get("fidelity", "unknown") for sched, s in by.items()}
                     for point, by in emu_pts.items()},
    }


def build_document(scenario, emu_folder: Path, flows: dict[str, Path], cal: dict,
                   factors: dict[int, float], sequential: dict | None = None) -> dict:
    """comparison.json: every section, in the order the report reads them."""
    j = _judging(scenario, emu_folder, flows, cal, factors)
    sections, whole, above = _transfer_sections(j)
    # the claims: the verdict's model (TCP terms) against faithful packet runs; at the
    # level of a sequential validation's last look when it stopped early
    level = sequential["level"] if sequential else stats.CONFIDENCE
    spread = trajectory.spread(j.tcp_twin)  # one run is one draw: the verdicts count it
    gains = point_claims(j.emu_cells, j.flow_cells["tcp"], level, normal=bool(sequential),
                         replayed=j.replays["replay_tcp"], draws=spread)
    verdicts = {name: ttft_verdicts(j.emu_cells, j.flow_cells[name])
                for name in ("calibrated", "tcp")}
    decisions = _decisions(j.emu_cells, j.flow_cells, j.loads, verdicts["tcp"])
    floor = repeat.packets_against_packets(
        [j.emu_cells] + [faithful_cells(cells_of(f))[0]
                         for f in repeat.repeat_folders(emu_folder.parent)],
        j.by_tier, j.replays["replay_tcp"])
    asked = scenario.network.ecmp
    first = ("transfers", "stalls", "arrival")
    faithful = engine_comparison(per_point(j.emu_cells), per_point(j.flow_cells["tcp"]))
    return {
        "scenario": scenario.name,
        "ecmp": {"scenario": asked, "compared": packet_ecmp(asked),
                 "meaning": ECMP_MODES[packet_ecmp(asked)]},
        "folders": {"emulation": str(emu_folder),
                    **{f"flow_{name}": str(f) for name, f in flows.items()}},
        "calibration": cal,
        **{k: sections[k] for k in first},
        "repeat": floor,
        **{k: v for k, v in sections.items() if k not in first},
        **beside.judged(cal.get("tcp", {}), j.replayer, j.all_emu, j.emu_cells, factors,
                        j.flow_cells, j.loads),
        "decisions": decisions,
        "trajectory": spread,
        "excluded_runs": j.flagged,
        **_engine_sections(j, verdicts),
        "claims": gains,
        "sequential": sequential,
        "judged": {"measured_requests": sum(
            json.loads((c / "summary.json").read_text()).get("requests", 0)
            for c in j.emu_cells.values()),
            "paired_requests": sum(by["n"] * len(scenario.schedulers) for by in gains.values()),
            "seeds": scenario.seeds},
        "targets": {**targets(above["replay_tcp"], whole["engines_tcp"], faithful,
                              verdicts["tcp"], len(j.all_emu), len(j.flagged)),
                    "packets": packets_engine(emu_folder),
                    **claim_targets(gains),
                    **divergence_targets(decisions), **repeat.repeat_targets(floor)},
    }


def packets_engine(folder: Path) -> str:
    """Which engine made a validation's packets run: emulation or ns3."""
    path = folder / "summary.json"
    engine = json.loads(path.read_text()).get("engine") if path.exists() else None
    return "ns3" if engine == "ns3" else "emulation"


def _decisions(emu_cells: dict, flow_cells: dict, loads: dict, free: dict) -> dict | None:
    """Scheduling divergence: the verdict's model free and forced to the packets'
    placements (divergence.py), each against the faithful packet runs."""
    if "tcp_forced" not in flow_cells:
        return None
    forced = flow_cells["tcp_forced"]
    return {"free": divergence.agreement(emu_cells, flow_cells["tcp"]),
            "forced": divergence.agreement(emu_cells, forced),
            "ttft": divergence.gap_closed(free, ttft_verdicts(emu_cells, forced)),
            "engines": with_intervals(whole_pairs(emu_cells, loads["tcp_forced"])),
            "seed_rankings": seed_rankings(emu_cells, forced),
            "overlap": divergence.overlaps(emu_cells, flow_cells["tcp"], forced)}


def _spread(rows: list[dict]) -> dict:
    spread = compare.shard_spread(rows)
    return {"n": len(spread), "p50": percentile(spread, 50), "p90": percentile(spread, 90)}
