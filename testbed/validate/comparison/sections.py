"""The sections of a validation's comparison.json, computed from the packets' run and the
flow model's (pure but for reading the run folders): per-transfer errors, the engines per
scheduler, the claims, divergence, the floor and the targets, in the order the report
reads them. pipeline.judge runs the flow model and hands its folders here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from testbed.inputs import read_json
from testbed.metrics import aggregate, percentile, tcp_stalls
from testbed.records import read_csv
from testbed.topologies.routing import ECMP_MODES, packet_ecmp
from testbed.validate.comparison import beside
from testbed.validate.comparison.summary import (
    claim_targets,
    divergence_targets,
    targets,
    with_intervals,
)
from testbed.validate.comparison.verdicts import (
    draw_rankings,
    faithful_cells,
    point_claims,
    seed_rankings,
    ttft_verdicts,
)
from testbed.validate.engines import repeat
from testbed.validate.engines.flow_match import flow_scenario, replay_scenario
from testbed.validate.engines.flow_replay import replay_cells, whole_pairs
from testbed.validate.judging import arrival, divergence, model_errors, stats, trajectory, validity
from testbed.workloads.build import seed_groups

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
            got, _ = model_errors.match_transfers(read_csv(cell / "transfers.csv"), model_rows[key])
            pairs.extend(got)
    return pairs


def per_point(cells: dict[str, Path]) -> dict[str, dict[str, dict]]:
    """point -> scheduler -> seeds' aggregate of summary.json (+ the fidelity verdicts)."""
    seeds: dict[str, dict[str, list[dict]]] = {}
    for key, cell in cells.items():
        point, sched, _ = key.split("/")
        seeds.setdefault(point, {}).setdefault(sched, []).append(
            read_json((cell / "summary.json"), object))
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
    return {point: {"metrics": model_errors.metric_comparison(emu[point], flow[point]),
                    "ranking": model_errors.ranking_agreement(emu[point], flow[point])}
            for point in sorted(set(emu) & set(flow))}


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
    tcp_twin = flow_scenario(scenario, factors, cal.get("tcp", {}))
    replayer = replay_scenario(scenario, factors, cal.get("tcp", {}))
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
                  for r in model_errors.whole_transfers(read_csv(c / "transfers.csv"))]
    emulation = j.scenario.emulation
    return {
        "transfers": {name: model_errors.error_summary(p) for name, p in shard_pairs.items()},
        "stalls": {"connections": tcp_stalls(emu_rows),
                   "replay_tcp": model_errors.stall_split(shard_pairs["replay_tcp"])},
        "arrival": arrival.by_arrival(j.all_emu, j.replays["replay_tcp"], j.by_tier),
        "whole_transfers": {name: with_intervals(p) for name, p in whole.items()},
        "whole_above_floor": {name: with_intervals(p) for name, p in above.items()},
        "whole_below_floor": {name: model_errors.error_summary(p) for name, p in below.items()},
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
        "draw_rankings": draw_rankings(j.emu_cells, seed_groups(j.scenario)),
        "tiers": {point: {sched: {"packets": emu_pts[point][sched].get("tier_share", {}),
                                  "flow": pts["tcp"].get(point, {}).get(sched, {}).get(
                                      "tier_share", {})}
                          for sched in emu_pts[point]} for point in emu_pts},
        "fidelity": {point: {sched: s.get("fidelity", "unknown") for sched, s in by.items()}
                     for point, by in emu_pts.items()},
    }


def build_document(scenario, emu_folder: Path, flows: dict[str, Path], cal: dict,
                   factors: dict[int, float], sequential: dict | None = None,
                   executor=None) -> dict:
    """comparison.json: every section, in the order the report reads them (`executor`:
    where the flow model's draws run)."""
    j = _judging(scenario, emu_folder, flows, cal, factors)
    sections, whole, above = _transfer_sections(j)
    # the claims: the verdict's model (TCP terms) against faithful packet runs; at the
    # level of a sequential validation's last look when it stopped early
    level = sequential["level"] if sequential else stats.CONFIDENCE
    spread = trajectory.spread(j.tcp_twin, executor=executor)  # one run is one draw
    gains = point_claims(j.emu_cells, j.flow_cells["tcp"], level, normal=bool(sequential),
                         replayed=j.replays["replay_tcp"], draws=spread,
                         group_of=seed_groups(scenario))
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
            read_json((c / "summary.json"), object).get("requests", 0)
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
    engine = read_json(path, object).get("engine") if path.exists() else None
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
    spread = model_errors.shard_spread(rows)
    return {"n": len(spread), "p50": percentile(spread, 50), "p90": percentile(spread, 90)}
